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

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const Metadata& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> host;
  uint64_t at = 0;
  for (const auto& [name, t] : tensors) {
    TG_CHECK(t.defined(), "safetensors", "tensor '", name, "' is undefined");
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
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
    auto bad = [&](const std::string& what) {
      fail("safetensors", "'", path, "': tensor '", name, "' ", what);
    };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      bad("must have dtype, shape and data_offsets");
    Entry e{name, kFloat32, {}, 0, 0};
    if (!v["dtype"].is_string() || !parse_dtype(v["dtype"].get<std::string>(), e.dtype))
      bad("has dtype " + v["dtype"].dump() + ", expected one of " + known_dtypes());
    if (!v["shape"].is_array()) bad("has a shape that is not an array");
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) bad("has shape " + v["shape"].dump() + " with a bad size");
      e.shape.push_back(d.get<int64_t>());
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
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t at = 0;
  for (const Entry& e : entries) {
    TG_CHECK(e.begin == at, "safetensors", "'", path, "': tensor '", e.name, "' starts at byte ",
             e.begin, ", expected ", at, " (overlapping or gapped data)");
    at = e.end;
  }
  TG_CHECK(at == data_size, "safetensors", "'", path, "': the tensors cover ", at, " of the ",
           data_size, " data bytes");
  for (const Entry& e : entries) {
    file.tensors.emplace_back(
        e.name, from_buffer(data + e.begin, e.dtype, numel_of(e.shape), e.shape, e.dtype));
  }
  return file;
}

}  // namespace tg::nn
