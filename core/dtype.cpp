#include "core/dtype.h"

namespace tg {

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

std::ostream& operator<<(std::ostream& os, Device d) {
  return d.is_cpu() ? (os << "cpu") : (os << "cuda:" << d.index);
}

}  // namespace tg
