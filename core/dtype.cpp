#include "core/dtype.h"

namespace tg {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Int64:
      return "int64";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

std::ostream& operator<<(std::ostream& os, Device d) {
  return d.is_cpu() ? (os << "cpu") : (os << "cuda:" << d.index);
}

}  // namespace tg
