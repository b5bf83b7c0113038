#include "models/checkpoint.h"

#include <nlohmann/json.hpp>
#include <set>

#include "autograd/grad_mode.h"

namespace tg::nn {

namespace {

// Copies `file` tensors into `into` by name after checking that both hold the same names,
// shapes and dtypes.
void copy_named(const std::string& path, const NamedTensors& file, const NamedTensors& into,
                const char* what) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : file) by_name[name] = &t;
  std::set<std::string> expected;
  for (const auto& [name, p] : into) {
    expected.insert(name);
    auto it = by_name.find(name);
    TG_CHECK(it != by_name.end(), "checkpoint", "'", path, "' has no tensor '", name, "' that the ",
             what, " expects (a checkpoint of another model?)");
    const Tensor& t = *it->second;
    TG_CHECK(t.sizes() == p.sizes(), "checkpoint", "'", path, "': tensor '", name, "' has shape ",
             shape_str(t.sizes()), ", the ", what, " expects ", shape_str(p.sizes()));
    TG_CHECK(t.dtype() == p.dtype(), "checkpoint", "'", path, "': tensor '", name, "' has dtype ",
             t.dtype(), ", the ", what, " expects ", p.dtype());
  }
  for (const auto& [name, t] : file) {
    TG_CHECK(expected.count(name), "checkpoint", "'", path, "' holds tensor '", name, "' that the ",
             what, " does not have (a checkpoint of another model?)");
  }
  NoGradGuard no_grad;
  for (const auto& [name, p] : into) Tensor(p).copy_(*by_name[name]);
}

}  // namespace

void save_module(const std::string& path, const Module& model, const Metadata& metadata) {
  save_safetensors(path, model.named_parameters(), metadata);
}

Metadata load_module(const std::string& path, Module& model) {
  return load_module(load_safetensors(path), path, model);
}

Metadata load_module(const SafetensorsFile& f, const std::string& path, Module& model) {
  copy_named(path, f.tensors, model.named_parameters(), "model");
  return f.metadata;
}

void save_optimizer(const std::string& path, const Optimizer& opt, const Metadata& metadata) {
  Metadata m = metadata;
  m["steps"] = std::to_string(opt.steps());
  save_safetensors(path, opt.state(), m);
}

Metadata load_optimizer(const std::string& path, Optimizer& opt) {
  return load_optimizer(load_safetensors(path), path, opt);
}

Metadata load_optimizer(const SafetensorsFile& f, const std::string& path, Optimizer& opt) {
  auto it = f.metadata.find("steps");
  TG_CHECK(it != f.metadata.end(), "checkpoint", "'", path,
           "' has no 'steps' metadata: not an optimizer checkpoint");
  int64_t steps = -1;
  try {
    steps = std::stoll(it->second);
  } catch (const std::exception&) {
  }
  TG_CHECK(steps >= 0, "checkpoint", "'", path, "' has steps '", it->second,
           "', expected a non-negative integer");
  copy_named(path, f.tensors, opt.state(), "optimizer");
  opt.set_steps(steps);
  return f.metadata;
}

std::string config_to_json(const TransformerConfig& c) {
  nlohmann::ordered_json j = {{"vocab", c.vocab},
                              {"d_model", c.d_model},
                              {"layers", c.layers},
                              {"heads", c.heads},
                              {"kv_heads", c.kv_heads},
                              {"ffn", c.ffn_size()},
                              {"rope_theta", c.rope_theta},
                              {"norm_eps", c.norm_eps},
                              {"attn_dropout", c.attn_dropout},
                              {"tie_weights", c.tie_weights},
                              {"dtype", dtype_name(c.dtype)}};
  return j.dump();
}

TransformerConfig config_from_json(const std::string& text) {
  TransformerConfig c;
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    c.vocab = j.at("vocab").get<int64_t>();
    c.d_model = j.at("d_model").get<int64_t>();
    c.layers = j.at("layers").get<int64_t>();
    c.heads = j.at("heads").get<int64_t>();
    c.kv_heads = j.at("kv_heads").get<int64_t>();
    c.ffn = j.at("ffn").get<int64_t>();
    c.rope_theta = j.at("rope_theta").get<double>();
    c.norm_eps = j.at("norm_eps").get<double>();
    c.attn_dropout = j.at("attn_dropout").get<double>();
    c.tie_weights = j.at("tie_weights").get<bool>();
    const std::string dt = j.at("dtype").get<std::string>();
    TG_CHECK(dt == dtype_name(kFloat32) || dt == dtype_name(kFloat64), "checkpoint",
             "config dtype '", dt, "' is not float32 or float64");
    c.dtype = dt == dtype_name(kFloat64) ? kFloat64 : kFloat32;
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint", "the stored model config is not valid: ", e.what());
  }
  c.validate();
  return c;
}

}  // namespace tg::nn
