// Every public op. (Internal ones, for the library itself: ops/unary_op.h, the raw unary
// kernel; ops/optimizer_ops.h, the fused optimizer updates behind models/optim.h.)
#pragma once
#include "ops/autocast.h"
#include "ops/elementwise.h"
#include "ops/factories.h"
#include "ops/fused_kernels.h"
#include "ops/join.h"
#include "ops/linalg.h"
#include "ops/nn.h"
#include "ops/reduce.h"
#include "ops/rope.h"
#include "ops/sdpa.h"
#include "ops/sdpa_paged.h"
