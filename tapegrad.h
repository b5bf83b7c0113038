// tapegrad: #include <tapegrad.h> is all a user needs.
#pragma once
#include "autograd/autograd.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "backends/cuda_api.h"
#include "backends/kernel_profile.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "models/models.h"
#include "ops/ops.h"
