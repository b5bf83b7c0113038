#include "core/dtype.h"

namespace tg {

namespace {
struct Names {
  const char* name;
  const char* safetensors;
};
// Indexed by DType, whose values are the list's positions.
constexpr Names kNames[] = {
#define TG_DTYPE(Name, type, name, st_name, floating) {name, st_name},
#include "core/dtypes.def"
};
}  // namespace

const char* dtype_name(DType t) { return kNames[static_cast<size_t>(t)].name; }
const char* dtype_safetensors_name(DType t) { return kNames[static_cast<size_t>(t)].safetensors; }

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

std::ostream& operator<<(std::ostream& os, Device d) {
  return d.is_cpu() ? (os << "cpu") : (os << "cuda:" << d.index);
}

}  // namespace tg
