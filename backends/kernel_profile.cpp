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

 private:
  const char* kind_;
  int cuda_device_;
  std::chrono::steady_clock::time_point start_;
};

struct ProfilingBackend final : Backend {
  ProfilingBackend(Backend& inner, int cuda_device) : b(inner), dev(cuda_device) {}
  Backend& b;
  int dev;  // -1 on the CPU
  void copy(const View& s, const View& d) override {
    Timed t("copy", dev);
    b.copy(s, d);
  }
  void fill(const View& d, double v) override {
    Timed t("elementwise", dev);
    b.fill(d, v);
  }
  void arange(const View& d, double s, double st) override {
    Timed t("elementwise", dev);
    b.arange(d, s, st);
  }
  void unary(UnaryOp op, const View& x, const View& o, double p) override {
    Timed t("elementwise", dev);
    b.unary(op, x, o, p);
  }
  void binary(BinaryOp op, const View& x, const View& y, const View& o) override {
    Timed t("elementwise", dev);
    b.binary(op, x, y, o);
  }
  void where(const View& c, const View& x, const View& y, const View& o) override {
    Timed t("elementwise", dev);
    b.where(c, x, y, o);
  }
  void reduce(ReduceOp op, const View& x, const View& o, const View& a) override {
    Timed t("reduce", dev);
    b.reduce(op, x, o, a);
  }
  void matmul(const View& x, const View& y, const View& c) override {
    Timed t("matmul", dev);
    b.matmul(x, y, c);
  }
  void rand_uniform(const View& d, uint64_t s, uint64_t o) override {
    Timed t("random", dev);
    b.rand_uniform(d, s, o);
  }
  void rand_normal(const View& d, uint64_t s, uint64_t o) override {
    Timed t("random", dev);
    b.rand_normal(d, s, o);
  }
  void dropout(const View& x, const View& o, double p, uint64_t s, uint64_t off) override {
    Timed t("random", dev);
    b.dropout(x, o, p, s, off);
  }
  void softmax(const View& x, const View& o, bool log) override {
    Timed t("softmax", dev);
    b.softmax(x, o, log);
  }
  void gather_rows(const View& w, const View& i, const View& o) override {
    Timed t("rows", dev);
    b.gather_rows(w, i, o);
  }
  void scatter_add_rows(const View& g, const View& i, const View& gw) override {
    Timed t("rows", dev);
    b.scatter_add_rows(g, i, gw);
  }
  void sdpa_forward(const SdpaParams& p) override {
    Timed t("sdpa", dev);
    b.sdpa_forward(p);
  }
  void sdpa_backward(const SdpaParams& p, const View& d, const SdpaGradViews& g) override {
    Timed t("sdpa", dev);
    b.sdpa_backward(p, d, g);
  }
  void rms_norm_forward(const View& x, const View& w, double eps, const View& y,
                        const View& r) override {
    Timed t("norm", dev);
    b.rms_norm_forward(x, w, eps, y, r);
  }
  void rms_norm_backward(const View& dy, const View& x, const View& w, const View& r,
                         const View& dx, const View& dw) override {
    Timed t("norm", dev);
    b.rms_norm_backward(dy, x, w, r, dx, dw);
  }
  void rope(const View& x, const View& c, const View& s, int64_t dim, const View& o) override {
    Timed t("rope", dev);
    b.rope(x, c, s, dim, o);
  }
  void swiglu_forward(const View& x, const View& o) override {
    Timed t("swiglu", dev);
    b.swiglu_forward(x, o);
  }
  void swiglu_backward(const View& d, const View& x, const View& dx) override {
    Timed t("swiglu", dev);
    b.swiglu_backward(d, x, dx);
  }
  void adamw_step(const View& p, const View& g, const View& m, const View& v,
                  const AdamWStep& s) override {
    Timed t("optimizer", dev);
    b.adamw_step(p, g, m, v, s);
  }
  void to_host(const void* s, void* d, size_t n) override {
    Timed t("transfer", dev);
    b.to_host(s, d, n);
  }
  void from_host(const void* s, void* d, size_t n) override {
    Timed t("transfer", dev);
    b.from_host(s, d, n);
  }
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
