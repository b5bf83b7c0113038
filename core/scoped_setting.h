// A global on/off setting changed for a scope: sets it, and restores the value it found when
// the scope ends. Behind NoGradGuard, AnomalyGuard and FusedKernelsGuard.
#pragma once

namespace tg {

template <bool (*Get)(), void (*Set)(bool)>
class ScopedSetting {
 public:
  explicit ScopedSetting(bool on) : prev_(Get()) { Set(on); }
  ~ScopedSetting() { Set(prev_); }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;

 private:
  bool prev_;
};

}  // namespace tg
