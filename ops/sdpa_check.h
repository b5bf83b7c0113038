// The argument checks shared by sdpa and sdpa_reference.
#pragma once
#include "backends/sdpa_params.h"
#include "ops/sdpa.h"

namespace tg::detail {

// Validates q, k, v and the options ("[sdpa] ..." errors) and returns the kernel parameters
// (out and stats views left empty).
SdpaParams sdpa_params(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& o);

}  // namespace tg::detail
