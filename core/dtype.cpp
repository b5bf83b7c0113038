#include "core/dtype.h"

#include <cmath>

namespace tg {

double scalar_as(double v, DType dtype) {
  // A double at or beyond float's rounding limit (FLT_MAX plus half an ulp) rounds to inf; the
  // cast itself would be undefined behaviour there.
  if (dtype != kFloat64 && is_floating(dtype) && std::abs(v) >= 0x1.ffffffp127) {
    return std::copysign(INFINITY, v);
  }
  switch (dtype) {
    case kFloat64:
      return v;
    case kFloat32:
      return static_cast<float>(v);
    case kBFloat16:
      return static_cast<float>(bfloat16(v));
    case kFloat16:
      return static_cast<float>(float16(v));
    case kInt64:
      return static_cast<double>(static_cast<int64_t>(v));  // callers check fits first
    case kBool:
      return v != 0 ? 1.0 : 0.0;
  }
  return v;
}

bool scalar_fits(double v, DType dtype) {
  if (dtype == kInt64) return std::isfinite(v) && v == std::trunc(v) && v >= -0x1p63 && v < 0x1p63;
  if (is_floating(dtype)) return !std::isfinite(v) || std::isfinite(scalar_as(v, dtype));
  return true;
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (!is_floating(a) || !is_floating(b)) {
    if (is_floating(a)) return a;
    if (is_floating(b)) return b;
    return (a == kInt64 || b == kInt64) ? kInt64 : kBool;
  }
  if (a == kFloat64 || b == kFloat64) return kFloat64;
  return kFloat32;  // float32 with a 16-bit type, or bfloat16 with float16
}

std::ostream& operator<<(std::ostream& os, Device d) {
  return d.is_cpu() ? (os << "cpu") : (os << "cuda:" << d.index);
}

}  // namespace tg
