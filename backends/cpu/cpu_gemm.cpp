// The GEMM libraries behind cpu_gemm(): oneDNN (TAPEGRAD_ONEDNN) and OpenBLAS's OpenMP build
// (TAPEGRAD_OPENBLAS), each compiled in when CMake found it. Both thread with the one OpenMP
// pool of the library and run single-threaded when called inside a parallel region.
#include "backends/cpu/cpu_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
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

bool cpu_gemm_bf16_native() {
#ifdef TAPEGRAD_ONEDNN
  // The ISA values are bit sets: AMX's includes AVX512_BF16's, AVX2_VNNI's does not.
  static const bool has = (static_cast<unsigned>(dnnl_get_effective_cpu_isa()) &
                           dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
  return has && engine() == Engine::OneDNN;
#else
  return false;
#endif
}

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

#ifdef TAPEGRAD_ONEDNN
namespace {

// oneDNN's CPU engine, made once, and a stream on it for each calling thread.
dnnl_engine_t onednn_engine() {
  static const dnnl_engine_t engine = [] {
    dnnl_engine_t e = nullptr;
    const dnnl_status_t st = dnnl_engine_create(&e, dnnl_cpu, 0);
    TG_CHECK(st == dnnl_success, "matmul", "oneDNN's CPU engine failed with status ",
             static_cast<int>(st));
    return e;
  }();
  return engine;
}

struct OneDnnStream {
  dnnl_stream_t stream = nullptr;
  OneDnnStream() {
    const dnnl_status_t st =
        dnnl_stream_create(&stream, onednn_engine(), dnnl_stream_default_flags);
    TG_CHECK(st == dnnl_success, "matmul", "oneDNN's stream failed with status ",
             static_cast<int>(st));
  }
  ~OneDnnStream() { dnnl_stream_destroy(stream); }
  OneDnnStream(const OneDnnStream&) = delete;
  OneDnnStream& operator=(const OneDnnStream&) = delete;
};

// Owns what dnnl_*_create made, destroying it on every way out.
template <class T, dnnl_status_t (*Destroy)(T)>
struct Owned {
  T handle = nullptr;
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (handle) Destroy(handle);
  }
};

// false where oneDNN refuses the strides of `count` matrices (count 1: one matrix for every
// item of the batch).
bool matrices(dnnl_memory_desc_t& md, dnnl_data_type_t dt, int64_t count, const Matrices& x,
              int64_t rows, int64_t cols) {
  const int64_t ld = std::max<int64_t>(x.ld, 1);
  dnnl_dims_t dims = {count, rows, cols};
  dnnl_dims_t strides = {count == 1 ? rows * cols : x.stride, x.t ? 1 : ld, x.t ? ld : 1};
  return dnnl_memory_desc_init_by_strides(&md, 3, dims, dt, strides) == dnnl_success;
}

// The first of oneDNN's implementations of `desc` that is a brgemm kernel ("brg:..."); false
// where it has none. For a layout brgemm declines (an operand with a row stride above its width,
// or odd bfloat16 batches) oneDNN 2.6 offers its "gemm:jit" matmul next, which runs the same
// sgemm kernel as dnnl_sgemm (see below); the caller's Eigen (float32) or widening (bfloat16)
// takes those instead.
bool brgemm_matmul(dnnl_primitive_desc_t& pd, const dnnl_matmul_desc_t& desc) {
  Owned<dnnl_primitive_desc_iterator_t, dnnl_primitive_desc_iterator_destroy> it;
  if (dnnl_primitive_desc_iterator_create(&it.handle, &desc, nullptr, onednn_engine(), nullptr) !=
      dnnl_success)
    return false;
  do {
    dnnl_primitive_desc_t candidate = dnnl_primitive_desc_iterator_fetch(it.handle);
    const char* impl = nullptr;
    if (candidate &&
        dnnl_primitive_desc_query(candidate, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
        impl && std::strncmp(impl, "brg", 3) == 0) {
      pd = candidate;
      return true;
    }
    if (candidate) dnnl_primitive_desc_destroy(candidate);
  } while (dnnl_primitive_desc_iterator_next(it.handle) == dnnl_success);
  return false;
}

// C_i = op(A_i) op(B_i) for i < batch through oneDNN's matmul primitive; false, nothing
// written, where oneDNN has no brgemm kernel for the layout. The primitive, not dnnl_sgemm:
// oneDNN 2.6's AVX-512 sgemm kernel points the stack pointer into a heap buffer while it runs, so a
// signal handler that runs then (a profiler's SIGPROF, a training loop's SIGINT) corrupts the heap
// (oneDNN issue #4845, fixed in 3.11.2). Under a SIGPROF every 50 us, 384x384 sgemms aborted
// within 20 ms every time; the matmul primitive (brgemm) ran 3000 of them clean.
bool onednn_matmul(dnnl_data_type_t dt, int64_t batch, int64_t m, int64_t n, int64_t k,
                   const Matrices& a, const Matrices& b, const Matrices& c) {
  // A stride of 0 is one matrix for the whole batch: oneDNN broadcasts a batch dim of 1.
  auto md = [&](dnnl_memory_desc_t& out, const Matrices& x, int64_t rows, int64_t cols) {
    return matrices(out, dt, x.stride == 0 ? 1 : batch, x, rows, cols);
  };
  // op(A) is m x k: A itself is (k x m) row-major when transposed, read through swapped strides.
  dnnl_memory_desc_t amd, bmd, cmd;
  dnnl_matmul_desc_t desc;
  if (!md(amd, a, m, k) || !md(bmd, b, k, n) || !md(cmd, c, m, n) ||
      dnnl_matmul_desc_init(&desc, &amd, &bmd, nullptr, &cmd) != dnnl_success)
    return false;
  // oneDNN's primitive cache makes the descriptor and primitive of a shape seen before cost
  // about a microsecond, so nothing is cached here.
  Owned<dnnl_primitive_desc_t, dnnl_primitive_desc_destroy> pd;
  if (!brgemm_matmul(pd.handle, desc)) return false;
  Owned<dnnl_primitive_t, dnnl_primitive_destroy> prim;
  Owned<dnnl_memory_t, dnnl_memory_destroy> am, bm, cm;
  // oneDNN only reads the source and weights, though its memory objects take non-const data.
  auto* ap = const_cast<void*>(a.data);  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  auto* bp = const_cast<void*>(b.data);  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  auto* cp = const_cast<void*>(c.data);  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  dnnl_status_t st = dnnl_primitive_create(&prim.handle, pd.handle);
  if (st == dnnl_success) st = dnnl_memory_create(&am.handle, &amd, onednn_engine(), ap);
  if (st == dnnl_success) st = dnnl_memory_create(&bm.handle, &bmd, onednn_engine(), bp);
  if (st == dnnl_success) st = dnnl_memory_create(&cm.handle, &cmd, onednn_engine(), cp);
  if (st == dnnl_success) {
    thread_local OneDnnStream stream;
    const dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, am.handle}, {DNNL_ARG_WEIGHTS, bm.handle}, {DNNL_ARG_DST, cm.handle}};
    st = dnnl_primitive_execute(prim.handle, stream.stream, 3, args);
    if (st == dnnl_success) st = dnnl_stream_wait(stream.stream);
  }
  TG_CHECK(st == dnnl_success, "matmul", "oneDNN's ", dt == dnnl_f32 ? "float32" : "bfloat16",
           " matmul failed with status ", static_cast<int>(st), " for ", batch,
           " products of m=", m, " n=", n, " k=", k);
  return true;
}

}  // namespace
#endif

bool library_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float* c, int64_t ldc) {
  switch (engine()) {
    case Engine::OneDNN:
#ifdef TAPEGRAD_ONEDNN
      // false where oneDNN has no brgemm kernel for the layout: the caller's Eigen runs it then
      return onednn_matmul(dnnl_f32, 1, m, n, k, {a, lda, 0, ta}, {b, ldb, 0, tb},
                           {c, ldc, 0, false});
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
  // Without OpenBLAS and oneDNN (TAPEGRAD_BLAS=OFF, TAPEGRAD_ONEDNN=OFF) nothing reads them.
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c,
      (void)ldc;
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

bool library_gemm_batch(DType dt, int64_t batch, int64_t m, int64_t n, int64_t k, const Matrices& a,
                        const Matrices& b, void* c, int64_t ldc, int64_t stride_c) {
#ifdef TAPEGRAD_ONEDNN
  if (dt == kFloat32 ? engine() != Engine::OneDNN : dt != kBFloat16 || !cpu_gemm_bf16_native())
    return false;
  return onednn_matmul(dt == kFloat32 ? dnnl_f32 : dnnl_bf16, batch, m, n, k, a, b,
                       {c, ldc, stride_c, false});
#else
  (void)dt, (void)batch, (void)m, (void)n, (void)k, (void)a, (void)b, (void)c, (void)ldc,
      (void)stride_c;
  return false;
#endif
}

}  // namespace cpu
}  // namespace tg
