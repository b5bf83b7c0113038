// Checkpoints: a model's parameters and an optimizer's state, each a safetensors file whose
// names, shapes and dtypes are checked against what the model or optimizer expects.
#pragma once
#include <string>

#include "models/optim.h"
#include "models/safetensors.h"
#include "models/transformer.h"

namespace tg::nn {

// Parameters under their dotted names, plus `metadata`.
void save_module(const std::string& path, const Module& model, const Metadata& metadata = {});
// Copies the file's tensors into the model's parameters; the file must hold exactly the
// model's names, shapes and dtypes. Returns the file's metadata. The second form takes a file
// already read (`path` names it in messages).
Metadata load_module(const std::string& path, Module& model);
Metadata load_module(const SafetensorsFile& file, const std::string& path, Module& model);

// The optimizer's state tensors and its step count (metadata "steps").
void save_optimizer(const std::string& path, const Optimizer& opt, const Metadata& metadata = {});
Metadata load_optimizer(const std::string& path, Optimizer& opt);
Metadata load_optimizer(const SafetensorsFile& file, const std::string& path, Optimizer& opt);

// TransformerConfig as JSON text (stored in checkpoint metadata under "config").
std::string config_to_json(const TransformerConfig& cfg);
TransformerConfig config_from_json(const std::string& json);

}  // namespace tg::nn
