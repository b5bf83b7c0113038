// A training run's checkpoint as one unit: model.safetensors, optimizer.safetensors and any
// extra files (a loss log) in one directory, saved so that a crash at any point leaves either
// the previous complete set or the new one, never a model from one step beside an optimizer
// from another.
//
// A save writes every file under a temporary name that carries the new checkpoint's id
// (`model.safetensors.<id>.next`), then commits by renaming checkpoint.json (the id and the
// file list) into place, then renames the files over the old ones. Loading, and every save,
// first finishes a committed set whose renames were cut short, or removes the files of an
// uncommitted one. The model and optimizer files carry the id in their metadata, and a load
// refuses two files that do not belong together.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "models/checkpoint.h"

namespace tg::nn {

// Files saved with the checkpoint besides the model and optimizer: (name, contents).
using ExtraFiles = std::vector<std::pair<std::string, std::string>>;

// Saves model, optimizer and `extra` into `dir` (created if missing) as one checkpoint; every
// file's metadata gets `metadata` plus "checkpoint_id".
void save_training_checkpoint(const std::string& dir, const Module& model, const Optimizer& opt,
                              const Metadata& metadata, const ExtraFiles& extra = {});

// Loads the checkpoint in `dir` into model and optimizer after checking that the two files
// are one pair: the same checkpoint id and the same "step", "config" and "data" metadata
// where both have them. Returns the model file's metadata.
Metadata load_training_checkpoint(const std::string& dir, Module& model, Optimizer& opt);

// Finishes a committed save or removes an uncommitted one (what load and save do first).
// Returns whether `dir` then holds a model and an optimizer file.
bool recover_training_checkpoint(const std::string& dir);

// Called with each stage of a save as it completes ("model", "optimizer", "extra", "commit",
// "rename"), for tests of crash safety: the hook may end the process. Empty: no hook.
void set_checkpoint_fault_hook(std::function<void(const std::string& stage)> hook);

}  // namespace tg::nn
