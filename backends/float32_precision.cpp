// tg::set_float32_matmul_precision (cuda_api.h): one process-wide setting, in every build.
#include <atomic>
#include <cstdlib>
#include <string>

#include "backends/cuda_api.h"
#include "backends/float32_precision.h"
#include "core/error.h"

namespace tg {
namespace {
// 0: not set, so the environment's (read on every call) or "highest"; 1: "highest"; 2: "high".
std::atomic<int> g_setting{0};

int parse(const char* op, const char* what, const std::string& precision) {
  if (precision == "highest") return 1;
  if (precision == "high") return 2;
  fail(op, what, ": expected \"highest\" or \"high\", got \"", precision, "\"");
}
}  // namespace

void set_float32_matmul_precision(const std::string& precision) {
  g_setting.store(parse("set_float32_matmul_precision", "precision", precision));
}

std::string float32_matmul_precision() { return float32_tf32_allowed() ? "high" : "highest"; }

bool float32_tf32_allowed() {
  const int setting = g_setting.load();
  if (setting != 0) return setting == 2;
  const char* env = std::getenv("TAPEGRAD_FLOAT32_MATMUL_PRECISION");
  if (!env || !*env) return false;
  return parse("float32_matmul_precision", "TAPEGRAD_FLOAT32_MATMUL_PRECISION", env) == 2;
}

}  // namespace tg
