// The GEMM libraries behind cpu_gemm(): oneDNN (TAPEGRAD_ONEDNN) and OpenBLAS's OpenMP build
// (TAPEGRAD_OPENBLAS), each compiled in when CMake found it. Both thread with the one OpenMP
// pool of the library and run single-threaded when called inside a parallel region.
#include "backends/cpu/cpu_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>

#include "backends/cpu/simd.h"
#include "backends/cpu_api.h"
#include "core/error.h"

#ifdef TAPEGRAD_OPENBLAS
#include <cblas.h>
#endif
#ifdef TAPEGRAD_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace tg {
namespace {

enum class Engine : int { Eigen, OpenBLAS, OneDNN };

constexpr const char* name_of(Engine e) {
  return e == Engine::OneDNN ? "onednn" : e == Engine::OpenBLAS ? "openblas" : "eigen";
}

std::vector<Engine> built() {
  std::vector<Engine> e;
#ifdef TAPEGRAD_ONEDNN
  e.push_back(Engine::OneDNN);
#endif
#ifdef TAPEGRAD_OPENBLAS
  e.push_back(Engine::OpenBLAS);
#endif
  e.push_back(Engine::Eigen);
  return e;
}

Engine parse(const std::string& name) {
  for (Engine e : built())
    if (name == name_of(e)) return e;
  std::string choices;
  for (Engine e : built()) choices += std::string(choices.empty() ? "" : ", ") + name_of(e);
  throw Error("[cpu_gemm] unknown or unavailable GEMM library '" + name +
              "'; this build has: " + choices);
}

Engine default_engine() {
  if (const char* env = std::getenv("TAPEGRAD_CPU_GEMM"); env && *env) return parse(env);
  const std::vector<Engine> e = built();
  auto has = [&](Engine x) { return std::find(e.begin(), e.end(), x) != e.end(); };
  if (has(Engine::OneDNN) && __builtin_cpu_supports("avx512f")) return Engine::OneDNN;
  return e.front() == Engine::OneDNN && has(Engine::OpenBLAS) ? Engine::OpenBLAS : e.front();
}

std::atomic<int>& chosen() {
  static std::atomic<int> engine{static_cast<int>(default_engine())};
  return engine;
}

Engine engine() { return static_cast<Engine>(chosen().load(std::memory_order_relaxed)); }

}  // namespace

std::string cpu_gemm() { return name_of(engine()); }

std::vector<std::string> cpu_gemm_choices() {
  std::vector<std::string> names;
  for (Engine e : built()) names.emplace_back(name_of(e));
  return names;
}

void set_cpu_gemm(const std::string& name) { chosen().store(static_cast<int>(parse(name))); }

const char* cpu_isa() { return cpu::simd::isa_name(); }

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "unknown" : line.substr(start);
  }
  return "unknown";
}

namespace cpu {

#ifdef TAPEGRAD_OPENBLAS
namespace {
// BLAS insists on leading dimensions >= 1 even where a dimension is 0.
blasint ld(int64_t v) { return static_cast<blasint>(std::max<int64_t>(v, 1)); }
CBLAS_TRANSPOSE trans(bool t) { return t ? CblasTrans : CblasNoTrans; }
}  // namespace
#endif

bool library_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float* c, int64_t ldc) {
  switch (engine()) {
    case Engine::OneDNN:
#ifdef TAPEGRAD_ONEDNN
    {
      const dnnl_status_t st =
          dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, std::max<int64_t>(lda, 1), b,
                     std::max<int64_t>(ldb, 1), 0.0f, c, std::max<int64_t>(ldc, 1));
      TG_CHECK(st == dnnl_success, "matmul", "oneDNN's sgemm failed with status ",
               static_cast<int>(st), " for m=", m, " n=", n, " k=", k);
      return true;
    }
#endif
      return false;
    case Engine::OpenBLAS:
#ifdef TAPEGRAD_OPENBLAS
      cblas_sgemm(CblasRowMajor, trans(ta), trans(tb), static_cast<blasint>(m),
                  static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a, ld(lda), b, ld(ldb),
                  0.0f, c, ld(ldc));
      return true;
#endif
      return false;
    case Engine::Eigen:
      return false;
  }
  return false;
}

bool library_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                  const double* b, int64_t ldb, double* c, int64_t ldc) {
#ifdef TAPEGRAD_OPENBLAS
  if (engine() != Engine::Eigen) {
    cblas_dgemm(CblasRowMajor, trans(ta), trans(tb), static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), 1.0, a, ld(lda), b, ld(ldb), 0.0,
                c, ld(ldc));
    return true;
  }
#endif
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c,
      (void)ldc;
  return false;
}

}  // namespace cpu
}  // namespace tg
