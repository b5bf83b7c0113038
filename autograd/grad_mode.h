// Grad mode (is the tape recording?) and anomaly mode (check every gradient backward makes).
#pragma once
#include "core/scoped_setting.h"

namespace tg {

bool grad_enabled();
void set_grad_enabled(bool on);
bool anomaly_enabled();
void set_anomaly_enabled(bool on);

// Stops recording for its lifetime: for optimizers, initialisation and evaluation.
class NoGradGuard : ScopedSetting<grad_enabled, set_grad_enabled> {
 public:
  NoGradGuard() : ScopedSetting(false) {}
};

// Records again for its lifetime, inside a NoGradGuard: for a function that takes gradients
// itself (create_graph) wherever it is called from, as torch.enable_grad.
class EnableGradGuard : ScopedSetting<grad_enabled, set_grad_enabled> {
 public:
  EnableGradGuard() : ScopedSetting(true) {}
};

// For its lifetime backward checks each gradient it produces and throws on the first NaN or
// Inf, naming the op whose backward made it.
class AnomalyGuard : ScopedSetting<anomaly_enabled, set_anomaly_enabled> {
 public:
  AnomalyGuard() : ScopedSetting(true) {}
};

}  // namespace tg
