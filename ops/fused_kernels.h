// Whether ops call a backend's fused kernels (rms_norm, swiglu, rope, the AdamW update, SDPA's
// double backward, softmax's backward, logsumexp over the last dim, the unary ops' one-pass
// backward). On by default. Off, those ops run their composite formulas, written with other ops:
// the reference the fused kernels are tested against, and what runs on a backend that lacks a
// fused kernel.
#pragma once
#include "core/scoped_setting.h"

namespace tg {

void set_fused_kernels(bool on);
bool fused_kernels();

// Turns the fused kernels off (or on) for a scope, then restores the setting it found.
using FusedKernelsGuard = ScopedSetting<fused_kernels, set_fused_kernels>;

}  // namespace tg
