// Element types and the devices tensors live on.
#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>

namespace tg {

enum class DType : uint8_t { Float32, Float64, Int64, Bool };
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kBool = DType::Bool;

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
    case DType::Int64:
      return 8;
    case DType::Bool:
      return 1;
  }
  return 0;
}
constexpr bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }
const char* dtype_name(DType t);
std::ostream& operator<<(std::ostream& os, DType t);

// The C++ type of each dtype, and back.
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = kFloat32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = kFloat64;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = kInt64;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = kBool;
};

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
