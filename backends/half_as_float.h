// Float32 stand-ins for the 16-bit views of a kernel that computes in float32 or float64 only
// (SDPA, the fused kernels, softmax, the CPU GEMM): inputs are converted into float32 buffers
// on the kernel's device, outputs are computed into float32 buffers and rounded once into the
// 16-bit views by done(). Views of other dtypes pass through unchanged. Dims with stride 0
// (broadcasts) stay stride 0, so a broadcast mask is not expanded.
#pragma once
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "core/storage.h"

namespace tg {

class HalfAsFloat {
 public:
  HalfAsFloat(Backend& backend, Device device) : backend_(backend), device_(device) {}

  View in(const View& v);     // read by the kernel
  View out(const View& v);    // written by the kernel
  View inout(const View& v);  // read and written
  // Rounds the float32 outputs into their 16-bit views (a kernel that threw skips this).
  void done();

 private:
  View buffer_like(const View& v);

  Backend& backend_;
  Device device_;
  std::vector<std::unique_ptr<Storage>> buffers_;
  std::vector<std::pair<View, View>> outputs_;  // (float32 buffer, 16-bit view)
};

// Whether any of the views is bfloat16 or float16.
inline bool any_half(std::initializer_list<const View*> views) {
  for (const View* v : views)
    if (v->data && is_half(v->dtype)) return true;
  return false;
}

// Runs kernel(f) with a fresh HalfAsFloat f, then f.done() (backends/half_kernels.h).
template <class F>
void with_float32(Backend& backend, Device device, F&& kernel) {
  HalfAsFloat f(backend, device);
  kernel(f);
  f.done();
}

}  // namespace tg
