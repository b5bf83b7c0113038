// Seeded mutation fuzzing of the loaders: valid safetensors files (and text files) mutated
// byte by byte, cut, spliced and given hostile header numbers. Every input must load or be
// refused with a [safetensors] (or [text]) tg::Error: no other exception, and no crash, leak or
// undefined behaviour (CI runs this under ASan+UBSan). TAPEGRAD_FUZZ_ITERATIONS sets the count
// (default 20,000; the benchmark run in docs/ uses 1,000,000).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

using namespace tg;
namespace fs = std::filesystem;

namespace {

int64_t iterations() {
  const char* env = std::getenv("TAPEGRAD_FUZZ_ITERATIONS");
  return env ? std::max<int64_t>(1, std::atoll(env)) : 20000;
}

// Valid files: every dtype, empty tensors first, between and last, metadata; and a few that
// are broken by hand in ways a mutation rarely finds.
std::vector<std::vector<char>> corpus(const fs::path& dir) {
  std::vector<std::vector<char>> files;
  auto save = [&](const nn::NamedTensors& ts, const nn::Metadata& meta) {
    const fs::path p = dir / "seed.safetensors";
    nn::save_safetensors(p.string(), ts, meta);
    files.push_back(tgtest::read_bytes(p));
  };
  save({{"a", tgtest::rnd({2, 3}, 1).to(kFloat32)},
        {"ids", from_vector(std::vector<int64_t>{-5, 7}, {2})},
        {"m", from_vector(std::vector<bool>{true, false}, {2})},
        {"h", tgtest::rnd({3}, 2).to(kBFloat16)},
        {"f16", tgtest::rnd({1, 2}, 3).to(kFloat16)},
        {"d", tgtest::rnd({2}, 4)}},
       {{"config", R"({"layers": 2})"}, {"step", "10"}});
  save({{"empty", zeros({0})}, {"x", ones({3})}, {"mid", zeros({2, 0})}, {"y", ones({1})}}, {});
  save({}, {{"only", "metadata"}});
  const std::string python = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})";
  files.push_back(tgtest::safetensors_bytes(python, std::vector<char>(8, 0)));
  return files;
}

// Header text that mutations splice in: hostile numbers and JSON structure.
const std::vector<std::string> kTokens = {"18446744073709551615",
                                          "9223372036854775807",
                                          "-1",
                                          "1e400",
                                          "0",
                                          "4294967296",
                                          "[",
                                          "]",
                                          "{",
                                          "}",
                                          "\"",
                                          ",",
                                          ":",
                                          "null",
                                          "true",
                                          "\"BOOL\"",
                                          "\"F16\"",
                                          "\"I64\"",
                                          "\"__metadata__\"",
                                          "[0,0]",
                                          "[[[[[[[[",
                                          "\\u0000",
                                          "\xff\xfe",
                                          "\"shape\":[]"};

std::vector<char> mutate(std::vector<char> b, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  const int rounds = 1 + static_cast<int>(rng() % 4);
  for (int r = 0; r < rounds; ++r) {
    switch (rng() % 8) {
      case 0:  // flip a bit
        if (!b.empty()) b[pick(b.size())] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // a random byte
        if (!b.empty()) b[pick(b.size())] = static_cast<char>(rng());
        break;
      case 2:  // cut the end
        b.resize(pick(b.size() + 1));
        break;
      case 3: {  // delete a range
        const size_t at = pick(b.size() + 1), len = pick(16);
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                b.begin() + static_cast<std::ptrdiff_t>(std::min(b.size(), at + len)));
        break;
      }
      case 4: {  // duplicate a range
        const size_t at = pick(b.size() + 1), len = std::min(pick(32), b.size() - at);
        std::vector<char> piece(b.begin() + static_cast<std::ptrdiff_t>(at),
                                b.begin() + static_cast<std::ptrdiff_t>(at + len));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(pick(b.size() + 1)), piece.begin(),
                 piece.end());
        break;
      }
      case 5: {  // splice a token into the header
        const std::string& t = kTokens[pick(kTokens.size())];
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(std::min(b.size(), 8 + pick(200))),
                 t.begin(), t.end());
        break;
      }
      case 6: {  // a new header length: random, or off by a little
        if (b.size() < 8) break;
        uint64_t n = 0;
        std::memcpy(&n, b.data(), 8);
        n = rng() % 2 ? rng() : n + static_cast<uint64_t>(static_cast<int64_t>(rng() % 17) - 8);
        std::memcpy(b.data(), &n, 8);
        break;
      }
      default: {  // overwrite a digit run with a hostile number
        const size_t at = pick(b.size());
        for (size_t i = at; i < b.size(); ++i) {
          if (b[i] >= '0' && b[i] <= '9') {
            size_t j = i;
            while (j < b.size() && b[j] >= '0' && b[j] <= '9') ++j;
            const std::string& t = kTokens[pick(6)];
            b.erase(b.begin() + static_cast<std::ptrdiff_t>(i),
                    b.begin() + static_cast<std::ptrdiff_t>(j));
            b.insert(b.begin() + static_cast<std::ptrdiff_t>(i), t.begin(), t.end());
            break;
          }
        }
        break;
      }
    }
  }
  return b;
}

}  // namespace

TEST_CASE("fuzz: mutated safetensors files load or are a [safetensors] error") {
  const fs::path dir = fs::temp_directory_path() / ("tapegrad_fuzz" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<std::vector<char>> seeds = corpus(dir);
  for (const auto& s : seeds) CHECK_NOTHROW(nn::parse_safetensors(s, "seed"));
  std::mt19937_64 rng(20261123);
  const int64_t n = iterations();
  int64_t loaded = 0, refused = 0;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<char> input = mutate(seeds[rng() % seeds.size()], rng);
    try {
      nn::SafetensorsFile f = nn::parse_safetensors(input, "fuzz");
      for (const auto& [name, t] : f.tensors) (void)t.to(kFloat64).numel();  // read every value
      ++loaded;
    } catch (const Error& e) {
      const std::string what = e.what();
      if (what.rfind("[safetensors]", 0) != 0) {
        FAIL("input " << i << ": an error that is not [safetensors]: " << what);
      }
      ++refused;
    } catch (const std::exception& e) {
      FAIL("input " << i << ": not a tg::Error: " << e.what());
    }
  }
  MESSAGE(n << " inputs: " << loaded << " loaded, " << refused << " refused");
  CHECK(loaded + refused == n);
  CHECK(refused > n / 2);  // the mutations do break most files
  CHECK(loaded > 0);       // and some survive (metadata edits, flipped data bits)
  fs::remove_all(dir);
}

TEST_CASE("fuzz: any bytes as a text dataset load or are a [text] error") {
  const fs::path dir =
      fs::temp_directory_path() / ("tapegrad_fuzz_text" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::mt19937_64 rng(7);
  const int64_t n = std::max<int64_t>(1, iterations() / 100);
  for (int64_t i = 0; i < n; ++i) {
    std::string text(static_cast<size_t>(rng() % 200), '\0');
    for (char& c : text) c = static_cast<char>(rng());
    const fs::path p = dir / "t.txt";
    {
      std::ofstream out(p, std::ios::binary | std::ios::trunc);
      out << text;
    }
    try {
      nn::TextDataset d(p.string());
      nn::Batch b = d.batch(2, 1 + static_cast<int64_t>(rng() % 20), i, 0, rng() % 2 == 0);
      for (int64_t v : b.inputs.to_vector<int64_t>()) CHECK((v >= 0 && v < 256));
    } catch (const Error& e) {
      CHECK(std::string(e.what()).rfind("[text]", 0) == 0);
    }
  }
  fs::remove_all(dir);
}
