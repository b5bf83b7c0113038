// The CPU SDPA's setting (cpu_api.h): whether 16-bit products run on AMX's tile units, where
// the CPU and the build allow it (cpu_sdpa_amx.h has the kernels' side).
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/amx_tiles.h"
#include "backends/cpu/cpu_sdpa_scores.h"
#include "backends/cpu/simd.h"
#include "backends/cpu_api.h"

namespace tg {

namespace {
// -1: not set, the environment decides; else 0 or 1.
std::atomic<int>& sdpa_amx_setting() {
  static std::atomic<int> setting{-1};
  return setting;
}
}  // namespace

bool cpu_sdpa_amx() {
  // The AMX products need the AVX-512 build's tile strides (whole tiles of 16 floats).
  if (cpu::simd::kLanes<float> != 16 || !cpu::amx::available()) return false;
  const int set = sdpa_amx_setting().load();
  if (set >= 0) return set == 1;
  static const bool env_on = [] {
    const char* env = std::getenv("TAPEGRAD_CPU_SDPA_AMX");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  return env_on;
}

void set_cpu_sdpa_amx(bool on) { sdpa_amx_setting().store(on ? 1 : 0); }

// A head's query rows in more than one tile: the forward's tiles of several heads and key blocks
// read in place (few rows a head, as in decoding) keep the FMA kernel.
bool cpu_sdpa_on_amx(int64_t len_q) { return len_q > cpu::sdpa_tiles::kBr && cpu_sdpa_amx(); }

}  // namespace tg
