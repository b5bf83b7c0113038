// The CPU backend: a GEMM library chosen at run time for matmul (cpu_gemm.h), OpenMP loops for
// everything else. Its methods are defined across the cpu_*.cpp files, one per kind of kernel.
#pragma once
#include "backends/backend.h"
#include "backends/dispatch.h"
#include "backends/sdpa_params.h"

namespace tg::cpu {

struct CpuBackend final : Backend {
#include "backends/backend_overrides.inc"
};

}  // namespace tg::cpu
