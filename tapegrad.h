// tapegrad: #include <tapegrad.h> is all a user needs.
#pragma once
#include "autograd/autograd.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "backends/kernel_profile.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "models/models.h"
#include "ops/ops.h"

namespace tg {
// True when this build has CUDA and a device is present.
bool cuda_is_available();
}  // namespace tg
