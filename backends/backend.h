// The small kernel interface every device implements (its list: backends/kernels.def). Backends
// see raw buffers, sizes and strides; never autograd. Ops validate and allocate, then call one.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/shape.h"

namespace tg {

// A strided window onto a device buffer: `data` points at element 0.
struct View {
  void* data = nullptr;
  DType dtype = kFloat32;
  Shape sizes;
  Shape strides;
  int64_t numel() const { return numel_of(sizes); }
};

// The elementwise ops, generated from backends/elementwise_ops.def.
enum class UnaryOp : uint8_t {
#define TG_UNARY(Name, domain, expr) Name,
#define TG_BINARY(Name, domain, expr)
#include "backends/elementwise_ops.def"
};
enum class BinaryOp : uint8_t {
#define TG_UNARY(Name, domain, expr)
#define TG_BINARY(Name, domain, expr) Name,
#include "backends/elementwise_ops.def"
};

enum class ReduceOp : uint8_t { Sum, Max, Min };

struct SdpaParams;  // backends/sdpa_params.h
struct SdpaGradViews;
struct SdpaDoubleGradViews;
struct AdamWStep;  // backends/fused_math.h

// The kernels every device implements, generated from backends/kernels.def (where each one is
// documented). A fused kernel returns false when this backend lacks it (the default here); the
// op then runs its composite formula.
struct Backend {
  virtual ~Backend() = default;
#define TG_KERNEL(name, kind, params, args) virtual void name params = 0;
#define TG_FUSED(name, kind, params, args) \
  virtual bool name params { return lacks args; }
#include "backends/kernels.def"

 protected:
  template <class... A>
  static bool lacks(const A&... /*args*/) {
    return false;
  }
};

// A matrix (the last two dims of v) the GEMM can read directly: unit stride along rows
// (row-major) or along columns (column-major), with a leading dimension that fits.
inline bool gemm_row_major(const View& v) {
  const size_t n = v.sizes.size();
  return v.strides[n - 1] == 1 && v.strides[n - 2] >= v.sizes[n - 1];
}
inline bool gemm_col_major(const View& v) {
  const size_t n = v.sizes.size();
  return v.strides[n - 2] == 1 && v.strides[n - 1] >= v.sizes[n - 2];
}

Backend& cpu_backend();
Backend& cuda_backend(int device = 0);  // throws "built without CUDA" in CPU-only builds
Backend& backend_for(Device d);

}  // namespace tg
