#include "core/dtype.h"

namespace tg {

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
