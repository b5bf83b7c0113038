// Dtype dispatch shared by the CPU and CUDA backends: calls a generic lambda with a value of
// the C++ type a runtime DType names.
#pragma once
#include <cstdint>

#include "core/dtype.h"

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

// Calls f(T{}) for the floating dtypes only.
template <class F>
decltype(auto) dispatch_float(DType t, F&& f) {
  if (t == DType::Float64) return f(double{});
  return f(float{});
}

}  // namespace tg
