// Element types and the devices tensors live on.
#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>

#include "core/half.h"

namespace tg {

// The dtypes of core/dtypes.def.
enum class DType : uint8_t {
#define TG_DTYPE(Name, type, name, st_name, floating) Name,
#include "core/dtypes.def"
};
#define TG_DTYPE(Name, type, name, st_name, floating) inline constexpr DType k##Name = DType::Name;
#include "core/dtypes.def"

// Every dtype, in the list's order.
inline constexpr DType kAllDTypes[] = {
#define TG_DTYPE(Name, type, name, st_name, floating) DType::Name,
#include "core/dtypes.def"
};

// What the list says of each dtype, indexed by DType (whose values are the list's positions).
struct DTypeInfo {
  size_t size;
  bool floating;
  const char* name;         // "float32"
  const char* safetensors;  // "F32"
};
inline constexpr DTypeInfo kDTypeInfo[] = {
#define TG_DTYPE(Name, type, name, st_name, floating) {sizeof(type), floating, name, st_name},
#include "core/dtypes.def"
};
constexpr size_t dtype_size(DType t) { return kDTypeInfo[static_cast<size_t>(t)].size; }
constexpr bool is_floating(DType t) { return kDTypeInfo[static_cast<size_t>(t)].floating; }
constexpr const char* dtype_name(DType t) { return kDTypeInfo[static_cast<size_t>(t)].name; }
constexpr const char* dtype_safetensors_name(DType t) {
  return kDTypeInfo[static_cast<size_t>(t)].safetensors;
}
std::ostream& operator<<(std::ostream& os, DType t);

// bfloat16 and float16: stored in 16 bits, computed in float32 (core/half.h).
constexpr bool is_half(DType t) { return t == DType::BFloat16 || t == DType::Float16; }
// The dtype a tensor's arithmetic runs in (compute_t's): float32 for the 16-bit types. Saved
// statistics (SDPA's logsumexp, RMSNorm's rstd) are kept in it.
constexpr DType compute_dtype(DType t) { return is_half(t) ? DType::Float32 : t; }

// The dtype of a binary op's result, as PyTorch promotes: bool < int64 < floating; two
// floating dtypes give the wider, and bfloat16 with float16 gives float32 (neither holds the
// other).
DType promote_types(DType a, DType b);

// Whether `v` can be an element of `dtype` without surprise: int64 takes whole numbers in its
// range (no NaN, no inf, no fraction: a C++ scalar does not promote a tensor, so 0.5 would
// silently become 0), a floating dtype any value except a finite one that would round to inf,
// bool any value (nonzero is true).
bool scalar_fits(double v, DType dtype);
// The scalar as a value of `dtype`, converted the way elements are (int64 truncated, 16-bit
// types rounded once): what a comparison with a tensor of that dtype would see.
double scalar_as(double v, DType dtype);

// The C++ type of each dtype, and back.
template <class T>
struct dtype_of;
#define TG_DTYPE(Name, type, name, st_name, floating) \
  template <>                                         \
  struct dtype_of<type> {                             \
    static constexpr DType value = DType::Name;       \
  };
#include "core/dtypes.def"

enum class DeviceType : uint8_t { CPU, CUDA };
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT: implicit by design
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  friend bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
};
inline constexpr Device kCPU{DeviceType::CPU, 0};
inline constexpr Device kCUDA{DeviceType::CUDA, 0};
std::ostream& operator<<(std::ostream& os, Device d);

}  // namespace tg
