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

  void copy(const View& src, const View& dst) override;
  void fill(const View& dst, double value) override;
  void arange(const View& dst, double start, double step) override;
  void unary(UnaryOp op, const View& x, const View& out, double param) override;
  void binary(BinaryOp op, const View& a, const View& b, const View& out) override;
  void where(const View& cond, const View& a, const View& b, const View& out) override;
  void reduce(ReduceOp op, const View& x, const View& out, const View& arg) override;
  void matmul(const View& a, const View& b, const View& c) override;
  void rand_uniform(const View& dst, uint64_t seed, uint64_t offset) override;
  void rand_normal(const View& dst, uint64_t seed, uint64_t offset) override;
  void dropout(const View& x, const View& out, double p, uint64_t seed, uint64_t offset) override;
  void softmax(const View& x, const View& out, bool log) override;
  void gather_rows(const View& weight, const View& ids, const View& out) override;
  void scatter_add_rows(const View& grad, const View& ids, const View& grad_weight) override;
  void sdpa_forward(const SdpaParams& p) override;
  void sdpa_backward(const SdpaParams& p, const View& dout, const SdpaGradViews& g) override;
  void rms_norm_forward(const View& x, const View& w, double eps, const View& y,
                        const View& rstd) override;
  void rms_norm_backward(const View& dy, const View& x, const View& w, const View& rstd,
                         const View& dx, const View& dw) override;
  void rope(const View& x, const View& cos, const View& sin, int64_t seq_dim,
            const View& out) override;
  void swiglu_forward(const View& x, const View& out) override;
  void swiglu_backward(const View& dout, const View& x, const View& dx) override;
  void adamw_step(const View& p, const View& g, const View& m, const View& v,
                  const AdamWStep& s) override;
  void to_host(const void* src, void* dst, size_t bytes) override;
  void from_host(const void* src, void* dst, size_t bytes) override;
};

}  // namespace tg::cuda
