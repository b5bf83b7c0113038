// Dtype dispatch shared by the CPU and CUDA backends: calls a generic lambda with a value of
// the C++ type a runtime DType names.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace tg {

// Calls f(T{}) with T the C++ type of dtype.
template <class F>
decltype(auto) dispatch(DType t, F&& f) {
  switch (t) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::Int64:
      return f(int64_t{});
    case DType::Bool:
      return f(bool{});
  }
  return f(float{});
}

// Calls f(T{}) for the floating dtypes only.
template <class F>
decltype(auto) dispatch_float(DType t, F&& f) {
  if (t == DType::Float64) return f(double{});
  return f(float{});
}

}  // namespace tg
