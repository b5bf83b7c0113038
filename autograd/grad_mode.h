// Grad mode (is the tape recording?) and anomaly mode (check every gradient backward makes).
#pragma once

namespace tg {

bool grad_enabled();
void set_grad_enabled(bool on);
bool anomaly_enabled();
void set_anomaly_enabled(bool on);

// Stops recording for its lifetime: for optimizers, initialisation and evaluation.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// For its lifetime backward checks each gradient it produces and throws on the first NaN or
// Inf, naming the op whose backward made it.
class AnomalyGuard {
 public:
  AnomalyGuard() : prev_(anomaly_enabled()) { set_anomaly_enabled(true); }
  ~AnomalyGuard() { set_anomaly_enabled(prev_); }
  AnomalyGuard(const AnomalyGuard&) = delete;
  AnomalyGuard& operator=(const AnomalyGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace tg
