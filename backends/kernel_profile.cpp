#include "backends/kernel_profile.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>

#include "backends/backend.h"
#include "backends/cuda_api.h"
#include "core/error.h"

namespace tg {

namespace {

std::atomic<bool> g_on{false};
std::mutex g_mutex;
std::map<std::string, KernelTime> g_times;

// Adds the lifetime of the scope to `kind`.
class Timed {
 public:
  // On a CUDA device (cuda_device >= 0) the device is synchronized on both ends, so the time
  // is the kernel's own and not its launch's.
  Timed(const char* kind, int cuda_device) : kind_(kind), cuda_device_(cuda_device) {
    if (cuda_device_ >= 0) cuda_synchronize(cuda_device_);
    start_ = std::chrono::steady_clock::now();
  }
  ~Timed() {
    if (cancelled_) return;
    if (cuda_device_ >= 0) {
      try {
        cuda_synchronize(cuda_device_);
      } catch (const Error&) {  // a failed kernel: reported by the next call, never here
      }
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
            .count();
    std::lock_guard<std::mutex> lock(g_mutex);
    KernelTime& t = g_times[kind_];
    t.ms += ms;
    ++t.calls;
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;
  void cancel() { cancelled_ = true; }  // the call did nothing: record nothing

 private:
  const char* kind_;
  int cuda_device_;
  bool cancelled_ = false;
  std::chrono::steady_clock::time_point start_;
};

// Forwards every kernel of kernels.def to the inner backend, timed under the kernel's kind. A fused
// kernel that it lacks returns false and is not counted.
struct ProfilingBackend final : Backend {
  ProfilingBackend(Backend& inner, int cuda_device) : inner_(inner), dev_(cuda_device) {}
  // Names no kernel parameter takes (the list's parameters are in scope in every body).
  Backend& inner_;
  int dev_;  // -1 on the CPU
#define TG_KERNEL(name, kind, params, args) \
  void name params override {               \
    Timed t(kind, dev_);                    \
    inner_.name args;                       \
  }
#define TG_FUSED(name, kind, params, args) \
  bool name params override {              \
    Timed t(kind, dev_);                   \
    if (inner_.name args) return true;     \
    t.cancel();                            \
    return false;                          \
  }
#include "backends/kernels.def"
};

}  // namespace

void set_kernel_profiling(bool on) { g_on = on; }
bool kernel_profiling() { return g_on; }

std::map<std::string, KernelTime> kernel_profile() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_times;
}

void reset_kernel_profile() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_times.clear();
}

namespace detail {
Backend& profiling_backend(Device d) {
  if (d.is_cpu()) {
    static ProfilingBackend cpu(cpu_backend(), -1);
    return cpu;
  }
  static std::mutex m;
  static std::map<int, std::unique_ptr<ProfilingBackend>> cuda;
  std::lock_guard<std::mutex> lock(m);
  auto& b = cuda[d.index];
  if (!b) b = std::make_unique<ProfilingBackend>(cuda_backend(d.index), d.index);
  return *b;
}
}  // namespace detail

}  // namespace tg
