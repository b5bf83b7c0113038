// tg::cuda_sdpa_deterministic (cuda_api.h): one process-wide setting, in every build (a build
// without CUDA keeps and checks it, and nothing reads it).
#include <atomic>
#include <cstdlib>
#include <string>

#include "backends/cuda_api.h"
#include "core/error.h"

namespace tg {
namespace {
// -1: not set, so the environment's (read on every call), else 0 or 1
std::atomic<int> g_deterministic{-1};
}  // namespace

bool cuda_sdpa_deterministic() {
  const int set = g_deterministic.load();
  if (set != -1) return set == 1;
  const char* env = std::getenv("TAPEGRAD_CUDA_SDPA_DETERMINISTIC");
  if (!env || !*env) return true;
  const std::string s = env;
  if (s != "0" && s != "1")
    fail("cuda_sdpa_deterministic",
         "TAPEGRAD_CUDA_SDPA_DETERMINISTIC: expected \"1\" or \"0\", got \"", s, "\"");
  return s == "1";
}

void set_cuda_sdpa_deterministic(bool on) { g_deterministic.store(on ? 1 : 0); }

}  // namespace tg
