// The 16-bit floating storage types, bfloat16 and float16 (IEEE binary16). They only store:
// every operation converts to float, computes there and rounds the result once on the way back
// (round to nearest, ties to even; NaN stays NaN, infinities stay infinite, and a float16 past
// 65504 overflows to infinity). The conversions are plain bit arithmetic, the same on the host
// and on CUDA devices, and branch-light so that loops over them vectorize.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/host_device.h"

namespace tg {

namespace half_bits {

// The bits of a value as another type of the same size (std::bit_cast, on devices too).
template <class To, class From>
TG_HD inline To bit_cast(From v) {
  static_assert(sizeof(To) == sizeof(From));
  To t;
  memcpy(&t, &v, sizeof(To));
  return t;
}
TG_HD inline uint32_t float_bits(float f) { return bit_cast<uint32_t>(f); }
TG_HD inline float bits_float(uint32_t u) { return bit_cast<float>(u); }

// bfloat16 is float's upper half: same sign and exponent, 7 of its 23 fraction bits.
TG_HD inline uint16_t bf16_from_float(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  // Adding 0x7fff plus the kept part's lowest bit rounds the dropped half to nearest, ties to
  // even; a carry out of the fraction raises the exponent, up to infinity.
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
TG_HD inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// float16: 5 exponent bits (bias 15), 10 fraction bits; normal from 2^-14, subnormal down to
// 2^-24, largest finite 65504.
TG_HD inline uint16_t f16_from_float(float f) {
  const uint32_t u = float_bits(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  uint32_t h;
  if (a > 0x7f800000u) {
    h = 0x7e00u | ((a >> 13) & 0x3ffu);  // NaN: quiet, with the payload's top bits
  } else if (a >= 0x47800000u) {
    h = 0x7c00u;  // 2^16 and beyond (infinity included): infinity
  } else if (a >= 0x38800000u) {
    // Normal: rebias the exponent (127 -> 15), then round the 13 dropped bits to nearest even;
    // a carry may reach the exponent, and from 65520 up it reaches infinity (0x7c00).
    h = (a - ((127u - 15u) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  } else {
    // Below 2^-14: adding 0.5 puts |f| where float's spacing (2^-24) is float16's subnormal
    // step, so the float addition itself rounds to nearest even; the bits past 0.5 are the
    // result (0x400, the smallest normal, when it rounds up that far).
    h = float_bits(bits_float(a) + 0.5f) - 0x3f000000u;
  }
  return static_cast<uint16_t>(sign | h);
}
TG_HD inline float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  if (em >= 0x7c00u) return bits_float(sign | 0x7f800000u | ((em & 0x3ffu) << 13));  // inf, NaN
  if (em >= 0x0400u) return bits_float(sign | ((em << 13) + ((127u - 15u) << 23)));
  const float m = static_cast<float>(em) * 0x1p-24f;  // subnormal: exact
  return sign ? -m : m;
}

// A double rounded to float "to odd": truncated, with the lowest bit set when anything was
// dropped. Rounding that float once more to a format at least two bits narrower gives the
// correctly rounded result of the double (no double rounding), which both 16-bit types are.
TG_HD inline float float_round_to_odd(double d) {
  float f = static_cast<float>(d);
  if (d != d || static_cast<double>(f) == d) return f;
  uint32_t u = float_bits(f);
  if ((u & 1u) == 0) {
    // f is the even neighbour of d; the odd one lies on d's other side, one step away.
    const bool d_larger = (d < 0 ? -d : d) > static_cast<double>(f < 0 ? -f : f);
    u = d_larger ? u + 1 : u - 1;
    f = bits_float(u);
  }
  return f;
}

}  // namespace half_bits

// What a 16-bit format needs: its conversions to and from float.
struct BFloat16Format {
  TG_HD static uint16_t from_float(float f) { return half_bits::bf16_from_float(f); }
  TG_HD static float to_float(uint16_t h) { return half_bits::bf16_to_float(h); }
};
struct Float16Format {
  TG_HD static uint16_t from_float(float f) { return half_bits::f16_from_float(f); }
  TG_HD static float to_float(uint16_t h) { return half_bits::f16_to_float(h); }
};

// A 16-bit float in storage. Converts implicitly from any arithmetic value (rounded once:
// doubles and integers go through float_round_to_odd) and to float, so generic code written
// for float or double reads and writes it unchanged. Trivial, so it can live in CUDA shared
// memory and be copied with memcpy; T{} is +0.
template <class Format>
struct Half16 {
  uint16_t bits;

  Half16() = default;
  template <class U, std::enable_if_t<std::is_arithmetic_v<U>, int> = 0>
  TG_HD Half16(U v)  // NOLINT(google-explicit-constructor): converts like a builtin float
      : bits(Format::from_float(narrow(v))) {}
  template <class Other>
  TG_HD explicit Half16(Half16<Other> v) : bits(Format::from_float(static_cast<float>(v))) {}
  TG_HD operator float() const {  // NOLINT(google-explicit-constructor)
    return Format::to_float(bits);
  }

  static constexpr Half16 from_bits(uint16_t b) {
    Half16 h{};
    h.bits = b;
    return h;
  }

 private:
  template <class U>
  TG_HD static float narrow(U v) {
    if constexpr (std::is_same_v<U, float>) {
      return v;
    } else {
      return half_bits::float_round_to_odd(static_cast<double>(v));
    }
  }
};

using bfloat16 = Half16<BFloat16Format>;
using float16 = Half16<Float16Format>;

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

// The type arithmetic on T runs in: float for the 16-bit types (loaded, computed, rounded
// once when stored), T itself otherwise.
template <class T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

}  // namespace tg
