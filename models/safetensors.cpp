#include "models/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "ops/factories.h"

namespace tg::nn {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts need byte swapping");

namespace {

std::string known_dtypes() {
  std::string s;
  for (DType d : kAllDTypes) s += (s.empty() ? "" : ", ") + std::string(dtype_safetensors_name(d));
  return s;
}

bool parse_dtype(const std::string& s, DType& t) {
  for (DType d : kAllDTypes) {
    if (s == dtype_safetensors_name(d)) {
      t = d;
      return true;
    }
  }
  return false;
}

// Whether s is well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF): the JSON header can hold nothing else.
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int extra = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      extra = 1, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    for (int k = 1; k <= extra; ++k) {
      if (i + k >= s.size()) return false;
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

// s with bytes outside printable ASCII as \xNN, for a message.
std::string escaped(const std::string& s) {
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else {
      const char* hex = "0123456789abcdef";
      out += {'\\', 'x', hex[c >> 4], hex[c & 15]};
    }
  }
  return out;
}

void check_utf8(const std::string& s, const char* what, const std::string& path) {
  TG_CHECK(valid_utf8(s), "safetensors", "cannot write '", path, "': ", what, " '", escaped(s),
           "' is not valid UTF-8 (the header is JSON)");
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const Metadata& metadata) {
  for (const auto& [k, v] : metadata) {
    check_utf8(k, "metadata key", path);
    check_utf8(v, "metadata value", path);
  }
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> host;
  uint64_t at = 0;
  for (const auto& [name, t] : tensors) {
    TG_CHECK(t.defined(), "safetensors", "tensor '", name, "' is undefined");
    check_utf8(name, "tensor name", path);
    TG_CHECK(name != "__metadata__" && !header.contains(name), "safetensors", "tensor name '", name,
             "' is reserved or repeated");
    Tensor c = t.detach().to(kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(c.numel()) * dtype_size(c.dtype());
    header[name] = {{"dtype", dtype_safetensors_name(c.dtype())},
                    {"shape", c.sizes()},
                    {"data_offsets", {at, at + bytes}}};
    at += bytes;
    host.push_back(c);
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  const uint64_t n = json.size();

  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path tmp = target.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    TG_CHECK(out.good(), "safetensors", "cannot open '", tmp.string(), "' for writing");
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(json.data(), static_cast<std::streamsize>(n));
    for (const Tensor& c : host) {
      out.write(static_cast<const char*>(c.raw_data()),
                static_cast<std::streamsize>(c.numel() * dtype_size(c.dtype())));
    }
    out.flush();
    TG_CHECK(out.good(), "safetensors", "writing '", tmp.string(), "' failed (disk full?)");
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    fail("safetensors", "cannot rename the temporary file onto '", path, "'");
  }
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TG_CHECK(in.good(), "safetensors", "cannot open '", path, "': no such file or not readable");
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  return parse_safetensors(bytes, path);
}

SafetensorsFile parse_safetensors(const std::vector<char>& bytes, const std::string& path) {
  const uint64_t size = bytes.size();
  TG_CHECK(size >= 8, "safetensors", "'", path, "' is ", size,
           " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  TG_CHECK(n <= size - 8, "safetensors", "'", path, "' declares a header of ", n,
           " bytes but holds only ", size - 8, " after the length (truncated?)");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(n));
  } catch (const nlohmann::json::exception& e) {
    fail("safetensors", "'", path, "' has a header that is not valid JSON: ", e.what());
  }
  TG_CHECK(header.is_object(), "safetensors", "'", path,
           "' has a header that is not a JSON object");
  const uint64_t data_size = size - 8 - n;
  const char* data = bytes.data() + 8 + n;

  SafetensorsFile file;
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      TG_CHECK(v.is_object(), "safetensors", "'", path, "': __metadata__ must be an object");
      for (const auto& [k, s] : v.items()) {
        TG_CHECK(s.is_string(), "safetensors", "'", path, "': metadata '", k, "' is not a string");
        file.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    const std::string& tensor = name;  // a structured binding cannot be captured (clang 15)
    auto bad = [&](const std::string& what) {
      fail("safetensors", "'", path, "': tensor '", tensor, "' ", what);
    };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      bad("must have dtype, shape and data_offsets");
    Entry e{name, kFloat32, {}, 0, 0};
    if (!v["dtype"].is_string() || !parse_dtype(v["dtype"].get<std::string>(), e.dtype))
      bad("has dtype " + v["dtype"].dump() + ", expected one of " + known_dtypes());
    if (!v["shape"].is_array()) bad("has a shape that is not an array");
    // Sizes whose product (in bytes) fits comfortably in 63 bits: no overflow can make a huge
    // shape look like the bytes it spans.
    uint64_t elements = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) bad("has shape " + v["shape"].dump() + " with a bad size");
      const auto size = d.get<uint64_t>();
      if (size != 0 && elements > (uint64_t{1} << 59) / size)
        bad("has shape " + v["shape"].dump() + ", too large");
      elements *= size;
      e.shape.push_back(static_cast<int64_t>(size));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      bad("has data_offsets " + off.dump() + ", expected [begin, end]");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_size)
      bad("has data_offsets " + off.dump() + " outside the " + std::to_string(data_size) +
          " data bytes (truncated file?)");
    const uint64_t want = static_cast<uint64_t>(numel_of(e.shape)) * dtype_size(e.dtype);
    if (e.end - e.begin != want)
      bad("spans " + std::to_string(e.end - e.begin) + " bytes but its shape and dtype need " +
          std::to_string(want));
    entries.push_back(std::move(e));
  }
  // The tensors that hold bytes tile the data exactly; an empty one holds none, so any offset
  // within the data will do (Python's safetensors writes them at [0, 0]).
  // Tensors come back in the order of their data (the order they were written in).
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::vector<const Entry*> spans;
  for (const Entry& e : entries)
    if (e.end > e.begin) spans.push_back(&e);
  uint64_t at = 0;
  for (const Entry* e : spans) {
    TG_CHECK(e->begin == at, "safetensors", "'", path, "': tensor '", e->name, "' starts at byte ",
             e->begin, ", expected ", at, " (overlapping or gapped data)");
    at = e->end;
  }
  TG_CHECK(at == data_size, "safetensors", "'", path, "': the tensors cover ", at, " of the ",
           data_size, " data bytes");
  for (const Entry& e : entries) {
    if (e.dtype == kBool) {  // any other byte would be an invalid bool in memory
      for (uint64_t i = e.begin; i < e.end; ++i) {
        TG_CHECK(data[i] == 0 || data[i] == 1, "safetensors", "'", path, "': tensor '", e.name,
                 "' (BOOL) holds byte ", static_cast<int>(static_cast<unsigned char>(data[i])),
                 " at element ", i - e.begin, ", expected 0 or 1");
      }
    }
    file.tensors.emplace_back(
        e.name, from_buffer(data + e.begin, e.dtype, numel_of(e.shape), e.shape, e.dtype));
  }
  return file;
}

}  // namespace tg::nn
