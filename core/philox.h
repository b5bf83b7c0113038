// The one random stream of tapegrad: Philox4x32-10 (Random123), counter-based, so a value
// depends only on (seed, position) and never on tiling or thread count. DESIGN.md §5.
#pragma once
#include <Random123/philox.h>

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace tg {

// The 32-bit word at stream position `pos` for generator `seed`.
TG_HD inline uint32_t philox_word(uint64_t seed, uint64_t pos) {
  uint64_t block = pos / 4;
  philox4x32_ctr_t ctr = {
      {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}};
  philox4x32_key_t key = {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  philox4x32_ctr_t r = philox4x32(ctr, key);
  return r.v[pos % 4];
}

// A stream word as a uniform in (0, 1], evaluated in float32: u = word * 2^-32 + 2^-33 (the
// product is exact, so a fused multiply-add gives the same bits).
TG_HD inline float philox_word_to_uniform(uint32_t word) {
  return static_cast<float>(word) * 2.3283064365386963e-10f + 1.1641532182693481e-10f;
}

// The uniform at stream position `pos`.
TG_HD inline float philox_uniform(uint64_t seed, uint64_t pos) {
  return philox_word_to_uniform(philox_word(seed, pos));
}

// Box-Muller in double, from two uniforms of the stream.
TG_HD inline double philox_box_muller(double u1, double u2) {
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Standard normal: element i of a stream at `offset` uses the uniforms at positions
// offset + 2i and offset + 2i + 1.
TG_HD inline double philox_normal(uint64_t seed, uint64_t offset, uint64_t i) {
  return philox_box_muller(philox_uniform(seed, offset + 2 * i),
                           philox_uniform(seed, offset + 2 * i + 1));
}

// A generator is (seed, offset); offset counts 32-bit words already used.
struct Generator {
  uint64_t seed = 0;
  uint64_t offset = 0;
  // Returns the offset to use for an op consuming `words` words, and advances past them
  // (rounded up to a whole Philox block of 4).
  uint64_t take(uint64_t words) {
    uint64_t at = offset;
    offset += (words + 3) / 4 * 4;
    return at;
  }
};

// The generator rand/randn use when none is given; seeded by manual_seed.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace tg
