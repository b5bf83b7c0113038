// Every public op.
#pragma once
#include "ops/elementwise.h"
#include "ops/factories.h"
#include "ops/fused_kernels.h"
#include "ops/join.h"
#include "ops/linalg.h"
#include "ops/nn.h"
#include "ops/optimizer_ops.h"
#include "ops/reduce.h"
#include "ops/rope.h"
#include "ops/sdpa.h"
