// The random SDPA options of the kernel-against-reference sweeps (test_sdpa.cpp,
// test_sdpa_ragged.cpp): scale, causal in either alignment, window, ALiBi, softcap, dropout.
#pragma once
#include <tapegrad.h>

#include <cstdint>
#include <random>

namespace tgtest {

// How often each option is drawn where the sweeps differ.
struct SdpaOptionOdds {
  double causal = 0.5;
  int64_t max_window = 6;  // a window, when drawn, is uniform in [1, max_window]
  double alibi = 0.3;
};

inline tg::SdpaOptions random_sdpa_options(std::mt19937_64& rng, const SdpaOptionOdds& odds) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto coin = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  tg::SdpaOptions o;
  if (coin(0.3)) o.scale = 0.05 + 0.5 * std::uniform_real_distribution<double>(0, 1)(rng);
  o.causal = coin(odds.causal);
  if (coin(0.5)) o.causal_align = tg::CausalAlign::BottomRight;
  if (coin(0.25)) o.window = pick(1, odds.max_window);
  o.alibi = coin(odds.alibi);
  if (coin(0.25)) o.softcap = 2.0 + static_cast<double>(pick(0, 20)) / 4.0;
  if (coin(0.25)) {
    o.dropout_p = coin(0.5) ? 0.2 : 0.5;
    o.seed = static_cast<uint64_t>(pick(0, 1000));
    o.offset = static_cast<uint64_t>(pick(0, 3)) * 4;
  }
  return o;
}

}  // namespace tgtest
