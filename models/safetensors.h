// The safetensors format (https://huggingface.co/docs/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON mapping each tensor name to its dtype, shape and
// data_offsets (plus an optional "__metadata__" of strings), then the raw little-endian data.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "models/module.h"

namespace tg::nn {

using Metadata = std::map<std::string, std::string>;

struct SafetensorsFile {
  NamedTensors tensors;  // CPU tensors, in file order
  Metadata metadata;
};

// Writes atomically: a temporary file beside `path`, then a rename over it.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const Metadata& metadata = {});

// Reads and validates the whole file: header length against the file size, valid JSON,
// known dtypes (F32, F64, I64, BOOL, BF16, F16), shapes, and data offsets that tile the data
// exactly (empty tensors anywhere).
// Errors start with "[safetensors]" and name the file.
SafetensorsFile load_safetensors(const std::string& path);

// The same from the file's bytes in memory; `name` stands for the file in messages.
SafetensorsFile parse_safetensors(const std::vector<char>& bytes, const std::string& name);

}  // namespace tg::nn
