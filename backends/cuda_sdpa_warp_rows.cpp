// tg::cuda_sdpa_warp_rows (cuda_api.h): one process-wide setting, in every build (a build
// without CUDA keeps and checks it, and nothing reads it).
#include <atomic>
#include <cstdlib>
#include <string>

#include "backends/cuda_api.h"
#include "core/error.h"

namespace tg {
namespace {
// -1: not set, so the environment's (read on every call), else 0 (automatic)
std::atomic<int> g_rows{-1};
}  // namespace

int cuda_sdpa_warp_rows() {
  const int rows = g_rows.load();
  if (rows != -1) return rows;
  const char* env = std::getenv("TAPEGRAD_CUDA_SDPA_WARP_ROWS");
  if (!env || !*env) return 0;
  const std::string s = env;
  if (s != "0" && s != "16" && s != "32")
    fail("cuda_sdpa_warp_rows",
         "TAPEGRAD_CUDA_SDPA_WARP_ROWS: expected \"0\" (automatic), \"16\" or \"32\", got \"", s,
         "\"");
  return std::stoi(s);
}

void set_cuda_sdpa_warp_rows(int rows) {
  if (rows != 0 && rows != 16 && rows != 32)
    fail("set_cuda_sdpa_warp_rows", "rows: expected 0 (automatic), 16 or 32, got ", rows);
  g_rows.store(rows);
}

}  // namespace tg
