// Dtype dispatch shared by the CPU and CUDA backends: calls a generic lambda with a value of
// the C++ type a runtime DType names.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

namespace tg {

// Calls f(T{}) with T the C++ type of dtype (core/dtypes.def).
template <class F>
decltype(auto) dispatch(DType t, F&& f) {
  switch (t) {
    // NOLINTBEGIN(bugprone-macro-parentheses): `type` is a type name
#define TG_DTYPE(Name, type, name, st_name, floating) \
  case DType::Name:                                   \
    return f(type{});
#include "core/dtypes.def"
    // NOLINTEND(bugprone-macro-parentheses)
  }
  return f(float{});
}

// Calls f(T{}) for the floating dtypes, the 16-bit ones included (kernels that compute in
// compute_t<T>).
template <class F>
decltype(auto) dispatch_floating(DType t, F&& f) {
  if (t == DType::Float64) return f(double{});
  if (t == DType::BFloat16) return f(bfloat16{});
  if (t == DType::Float16) return f(float16{});
  return f(float{});
}

// Calls f(T{}) for float32 and float64: the kernels that widen 16-bit views first
// (backends/half_as_float.h). Anything else reaching here is a bug in the caller.
template <class F>
decltype(auto) dispatch_float(DType t, F&& f) {
  if (t == DType::Float64) return f(double{});
  if (t != DType::Float32)
    fail("dispatch_float", "internal: dtype ", t, " reached a float32/float64 kernel");
  return f(float{});
}

}  // namespace tg
