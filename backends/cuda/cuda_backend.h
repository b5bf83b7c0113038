// The CUDA backend: one instance per device, each with its own stream and cuBLAS handle
// (cuda_util.cuh). Its methods are defined across the cuda_*.cu files, one per kind of
// kernel, built as C++17 by nvcc (no Eigen here).
#pragma once
#include "backends/backend.h"
#include "backends/sdpa_params.h"

namespace tg::cuda {

struct CudaBackend final : Backend {
  explicit CudaBackend(int device) : device(device) {}
  int device;  // the CUDA device index every method runs on
  Device here() const { return {DeviceType::CUDA, device}; }

#include "backends/backend_overrides.inc"
};

}  // namespace tg::cuda
