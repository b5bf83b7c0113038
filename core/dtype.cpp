#include "core/dtype.h"

namespace tg {

const char* dtype_name(DType t) {
  switch (t) {
#define TG_DTYPE(Name, type, name, st_name, floating) \
  case DType::Name:                                   \
    return name;
#include "core/dtypes.def"
  }
  return "?";
}

const char* dtype_safetensors_name(DType t) {
  switch (t) {
#define TG_DTYPE(Name, type, name, st_name, floating) \
  case DType::Name:                                   \
    return st_name;
#include "core/dtypes.def"
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

std::ostream& operator<<(std::ostream& os, Device d) {
  return d.is_cpu() ? (os << "cpu") : (os << "cuda:" << d.index);
}

}  // namespace tg
