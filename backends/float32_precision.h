// The backends' view of tg::set_float32_matmul_precision (cuda_api.h): a flag read on every
// float32 GEMM and SDPA call, so a bool rather than the string the public getter returns.
#pragma once

namespace tg {

// True under set_float32_matmul_precision("high"): float32 products may use TF32.
bool float32_tf32_allowed();

}  // namespace tg
