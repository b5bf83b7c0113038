// tg::set_float32_matmul_precision (cuda_api.h): one process-wide setting, in every build.
#include <atomic>
#include <string>

#include "backends/cuda_api.h"
#include "backends/float32_precision.h"
#include "core/error.h"

namespace tg {
namespace {
std::atomic<bool> g_high{false};  // "highest" until set
}  // namespace

void set_float32_matmul_precision(const std::string& precision) {
  if (precision == "highest") {
    g_high.store(false);
  } else if (precision == "high") {
    g_high.store(true);
  } else {
    fail("set_float32_matmul_precision", "precision: expected \"highest\" or \"high\", got \"",
         precision, "\"");
  }
}

std::string float32_matmul_precision() { return float32_tf32_allowed() ? "high" : "highest"; }

bool float32_tf32_allowed() { return g_high.load(); }

}  // namespace tg
