#include "models/training_checkpoint.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"

namespace tg::nn {

namespace fs = std::filesystem;

namespace {

const char* const kModel = "model.safetensors";
const char* const kOptimizer = "optimizer.safetensors";
const char* const kManifest = "checkpoint.json";

std::function<void(const std::string&)>& fault_hook() {
  static std::function<void(const std::string&)> hook;
  return hook;
}

void reached(const std::string& stage) {
  if (fault_hook()) fault_hook()(stage);
}

std::string new_id() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

fs::path pending(const fs::path& dir, const std::string& name, const std::string& id) {
  return dir / (name + "." + id + ".next");
}

// A file of an unfinished save: "<name>.<16 hex digits>.next", or the writer's temporary of
// one ("...next.tmp<pid>").
bool is_pending(const std::string& name) {
  const size_t at = name.find(".next");
  if (at == std::string::npos || at < 17 || name[at - 17] != '.') return false;
  for (size_t i = at - 16; i < at; ++i)
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  return true;
}

struct Manifest {
  std::string id;
  std::vector<std::string> files;
};

// checkpoint.json, if there is one.
bool read_manifest(const fs::path& dir, Manifest& m) {
  std::ifstream in(dir / kManifest);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  try {
    const nlohmann::json j = nlohmann::json::parse(text.str());
    m.id = j.at("id").get<std::string>();
    m.files = j.at("files").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint", "'", (dir / kManifest).string(),
         "' is not a checkpoint manifest: ", e.what());
  }
  return true;
}

void write_file(const fs::path& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.flush();
  TG_CHECK(out.good(), "checkpoint", "writing '", path.string(), "' failed (disk full?)");
}

void rename_or_fail(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  TG_CHECK(!ec, "checkpoint", "cannot rename '", from.string(), "' to '", to.string(),
           "': ", ec.message());
}

// Metadata that two files of one checkpoint must agree on, where both carry it.
void check_pair(const fs::path& dir, const Metadata& model, const Metadata& opt) {
  for (const char* key : {"checkpoint_id", "step", "config", "data"}) {
    auto m = model.find(key), o = opt.find(key);
    if (m == model.end() || o == opt.end() || m->second == o->second) continue;
    fail("checkpoint", "'", dir.string(), "': ", kModel, " and ", kOptimizer,
         " are not one checkpoint: their '", key, "' differ ('", m->second, "' and '", o->second,
         "')");
  }
}

}  // namespace

void set_checkpoint_fault_hook(std::function<void(const std::string& stage)> hook) {
  fault_hook() = std::move(hook);
}

bool recover_training_checkpoint(const std::string& dir_name) {
  const fs::path dir(dir_name);
  if (!fs::is_directory(dir)) return false;
  Manifest m;
  const bool committed = read_manifest(dir, m);
  if (committed) {  // roll the committed set forward
    for (const std::string& f : m.files) {
      if (f.empty() || f.find('/') != std::string::npos) continue;  // not a name save writes
      const fs::path p = pending(dir, f, m.id);
      if (fs::exists(p)) rename_or_fail(p, dir / f);
    }
  }
  for (const auto& entry : fs::directory_iterator(dir)) {  // anything else pending: uncommitted
    if (is_pending(entry.path().filename().string())) {
      std::error_code ec;
      fs::remove(entry.path(), ec);
    }
  }
  return fs::exists(dir / kModel) && fs::exists(dir / kOptimizer);
}

void save_training_checkpoint(const std::string& dir_name, const Module& model,
                              const Optimizer& opt, const Metadata& metadata,
                              const ExtraFiles& extra) {
  const fs::path dir(dir_name);
  fs::create_directories(dir);
  recover_training_checkpoint(dir_name);
  const std::string id = new_id();
  Metadata meta = metadata;
  meta["checkpoint_id"] = id;
  save_module(pending(dir, kModel, id).string(), model, meta);
  reached("model");
  save_optimizer(pending(dir, kOptimizer, id).string(), opt, meta);
  reached("optimizer");
  std::vector<std::string> files{kModel, kOptimizer};
  for (const auto& [name, contents] : extra) {
    TG_CHECK(!name.empty() && name.find('/') == std::string::npos && name != kModel &&
                 name != kOptimizer && name != kManifest,
             "checkpoint", "extra file name '", name, "' must be a plain file name of its own");
    write_file(pending(dir, name, id), contents);
    files.push_back(name);
  }
  reached("extra");
  const nlohmann::json manifest = {{"id", id}, {"files", files}};
  const fs::path tmp = dir / (std::string(kManifest) + ".tmp");
  write_file(tmp, manifest.dump(1) + "\n");
  rename_or_fail(tmp, dir / kManifest);  // the commit point
  reached("commit");
  for (size_t i = 0; i < files.size(); ++i) {
    rename_or_fail(pending(dir, files[i], id), dir / files[i]);
    if (i == 0) reached("rename");
  }
}

Metadata load_training_checkpoint(const std::string& dir_name, Module& model, Optimizer& opt) {
  const fs::path dir(dir_name);
  TG_CHECK(recover_training_checkpoint(dir_name), "checkpoint", "no checkpoint in '", dir_name,
           "' (expected ", kModel, " and ", kOptimizer, ")");
  const std::string model_path = (dir / kModel).string(), opt_path = (dir / kOptimizer).string();
  // Both files read (once) and checked first, so that a mismatched pair changes neither model
  // nor optimizer.
  const SafetensorsFile mf = load_safetensors(model_path), of = load_safetensors(opt_path);
  check_pair(dir, mf.metadata, of.metadata);
  Manifest m;
  if (read_manifest(dir, m)) {
    auto id = mf.metadata.find("checkpoint_id");
    TG_CHECK(id != mf.metadata.end() && id->second == m.id, "checkpoint", "'", model_path,
             "' is not the file of the checkpoint that ", kManifest, " names (", m.id, ")");
  }
  Metadata meta = load_module(mf, model_path, model);
  load_optimizer(of, opt_path, opt);
  return meta;
}

}  // namespace tg::nn
