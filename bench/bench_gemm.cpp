// GEMM libraries side by side, for the choice cpu_gemm() makes (backends/cpu/cpu_gemm.cpp) and
// for the SDPA kernel's own tile products (backends/cpu/tile_gemm.h):
//  1. the reference transformer's training-step products (bench_train_step's model: 2048
//     tokens, d_model 256, packed q/k/v 384, SwiGLU 2 x 768), forward and both gradients, on
//     [threads] threads: OpenBLAS, BLIS, oneDNN (its sgemm, which tg::matmul no longer calls:
//     backends/cpu/cpu_gemm.cpp says why; table 2 shows what tg::matmul gets), Eigen;
//  2. the same products through tg::matmul in float32 and bfloat16, on [threads] threads: the
//     bfloat16 ones multiply natively where the machine line says "bf16 native", else widen to
//     float32 (ONEDNN_MAX_CPU_ISA=AVX512_CORE forces the widening on such a machine);
//  3. SDPA's three kinds of 64 x 64 x 64 tile product on one thread: tile_gemm, OpenBLAS,
//     oneDNN, Eigen.
// GFLOP/s, medians. OpenBLAS and BLIS both export cblas_sgemm, so each is opened on its own
// (dlopen, RTLD_LOCAL) from Debian's OpenMP builds; a library that is not installed shows "-".
//
//   bench_gemm [threads]
#include <dlfcn.h>

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/cpu/tile_gemm.h"
#include "bench_args.h"
#ifdef TAPEGRAD_BENCH_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace {

// cblas_sgemm(order, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                       float, float*, int);
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

struct Library {
  std::string name;
  Sgemm sgemm = nullptr;
  void (*set_threads)(int) = nullptr;
};

Library open_cblas(const char* name, const char* path, const char* threads_fn) {
  Library lib{name};
  if (void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    lib.sgemm = reinterpret_cast<Sgemm>(dlsym(h, "cblas_sgemm"));
    lib.set_threads = reinterpret_cast<void (*)(int)>(dlsym(h, threads_fn));
  }
  return lib;
}

template <class F>
double median_ms(F&& f, int reps) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<Mat>;

struct Shape {
  int m, n, k;
  bool ta, tb;
  const char* what;
};

// One product C = op(A) op(B) through each library; GFLOP/s, or a negative number for "-".
std::vector<double> run_shape(const Shape& s, std::vector<Library>& libs, int reps) {
  const int ar = s.ta ? s.k : s.m, ac = s.ta ? s.m : s.k, br = s.tb ? s.n : s.k,
            bc = s.tb ? s.k : s.n;
  std::vector<float> a(static_cast<size_t>(ar) * ac), b(static_cast<size_t>(br) * bc),
      c(static_cast<size_t>(s.m) * s.n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) * 0.1f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5) * 0.1f;
  const double gflop = 2.0 * s.m * s.n * s.k * 1e-6;  // per ms -> GFLOP/s
  std::vector<double> out;
  for (Library& lib : libs) {
    if (lib.name == "oneDNN") {
#ifdef TAPEGRAD_BENCH_ONEDNN
      out.push_back(gflop / median_ms(
                                [&] {
                                  dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.f,
                                             a.data(), ac, b.data(), bc, 0.f, c.data(), s.n);
                                },
                                reps));
#else
      out.push_back(-1);
#endif
    } else if (lib.name == "Eigen") {
      Map A(a.data(), ar, ac), B(b.data(), br, bc), C(c.data(), s.m, s.n);
      out.push_back(gflop / median_ms(
                                [&] {
                                  if (s.ta) {
                                    C.noalias() = A.transpose() * B;
                                  } else if (s.tb) {
                                    C.noalias() = A * B.transpose();
                                  } else {
                                    C.noalias() = A * B;
                                  }
                                },
                                reps));
    } else if (lib.sgemm) {
      out.push_back(gflop / median_ms(
                                [&] {
                                  lib.sgemm(kRowMajor, s.ta ? kTrans : kNoTrans,
                                            s.tb ? kTrans : kNoTrans, s.m, s.n, s.k, 1.f, a.data(),
                                            ac, b.data(), bc, 0.f, c.data(), s.n);
                                },
                                reps));
    } else {
      out.push_back(-1);
    }
  }
  return out;
}

void print_row(const std::string& label, const std::vector<double>& g) {
  std::printf("| %s |", label.c_str());
  for (double x : g) x < 0 ? std::printf(" - |") : std::printf(" %.0f |", x);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  return bench::guarded_main([&] {
    const bench::Args args = bench::parse_args("bench_gemm", argc, argv, 1, {"cpu"});
    const int threads = args.number(0, "threads", 2);
    tg::set_num_threads(threads);
    bench::print_machine();
    std::vector<Library> libs = {
        open_cblas("OpenBLAS", "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
                   "openblas_set_num_threads"),
        open_cblas("BLIS", "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4",
                   "bli_thread_set_num_threads"),
        Library{"oneDNN"}, Library{"Eigen"}};
    auto set_threads = [&](int n) {
      tg::set_num_threads(n);
      Eigen::setNbThreads(n);
      for (Library& lib : libs)
        if (lib.set_threads) lib.set_threads(n);
    };

    set_threads(threads);
    std::printf("\nTraining-step products, %d threads, GFLOP/s\n\n", threads);
    std::printf("| product (m x n x k) | OpenBLAS | BLIS | oneDNN | Eigen |\n");
    std::printf("| --- | ---: | ---: | ---: | ---: |\n");
    const Shape step[] = {
        {2048, 384, 256, false, true, "q/k/v projection, x W^T"},
        {2048, 1536, 256, false, true, "gate/up projection, x W^T"},
        {2048, 256, 768, false, true, "down projection, x W^T"},
        {2048, 256, 256, false, true, "output / head, x W^T"},
        {2048, 256, 1536, false, false, "gate/up input gradient, dY W"},
        {1536, 256, 2048, true, false, "gate/up weight gradient, dY^T X"},
        {384, 256, 2048, true, false, "q/k/v weight gradient, dY^T X"},
        {256, 768, 2048, true, false, "down weight gradient, dY^T X"},
        {1024, 1024, 1024, false, false, "square 1024"},
    };
    for (const Shape& s : step) {
      print_row(std::string(s.what) + " (" + std::to_string(s.m) + " x " + std::to_string(s.n) +
                    " x " + std::to_string(s.k) + ")",
                run_shape(s, libs, 15));
    }

    std::printf("\ntg::matmul, float32 and bfloat16, %d threads, GFLOP/s\n\n", threads);
    std::printf("| product (m x n x k) | float32 | bfloat16 | bfloat16 / float32 |\n");
    std::printf("| --- | ---: | ---: | ---: |\n");
    for (const Shape& s : step) {
      // op(A) and op(B) as views of row-major tensors, transposed where the library's are.
      const tg::Tensor a = s.ta ? tg::randn({s.k, s.m}).transpose(0, 1) : tg::randn({s.m, s.k});
      const tg::Tensor b = s.tb ? tg::randn({s.n, s.k}).transpose(0, 1) : tg::randn({s.k, s.n});
      const tg::Tensor a16 = a.to(tg::kBFloat16), b16 = b.to(tg::kBFloat16);
      const double gflop = 2.0 * s.m * s.n * s.k * 1e-6;
      const double f32 = gflop / median_ms([&] { tg::matmul(a, b); }, 15);
      const double bf16 = gflop / median_ms([&] { tg::matmul(a16, b16); }, 15);
      std::printf("| %s (%d x %d x %d) | %.0f | %.0f | %.2f |\n", s.what, s.m, s.n, s.k, f32, bf16,
                  bf16 / f32);
    }
    // Batches of small products (attention-sized), where per-call overheads show.
    for (const auto& [batch, m, k, n] :
         {std::array<int64_t, 4>{128, 128, 64, 128}, std::array<int64_t, 4>{512, 32, 32, 32}}) {
      const tg::Tensor a = tg::randn({batch, m, k}), b = tg::randn({batch, k, n});
      const tg::Tensor a16 = a.to(tg::kBFloat16), b16 = b.to(tg::kBFloat16);
      const double gflop = 2.0 * static_cast<double>(batch * m * n * k) * 1e-6;
      const double f32 = gflop / median_ms([&] { tg::matmul(a, b); }, 15);
      const double bf16 = gflop / median_ms([&] { tg::matmul(a16, b16); }, 15);
      std::printf("| batch of %ld (%ld x %ld x %ld) | %.0f | %.0f | %.2f |\n",
                  static_cast<long>(batch), static_cast<long>(m), static_cast<long>(n),
                  static_cast<long>(k), f32, bf16, bf16 / f32);
    }

    set_threads(1);
    libs.erase(libs.begin() + 1);  // BLIS: no faster on one thread; keeps the table short
    libs.insert(libs.begin(), Library{"tile_gemm"});
    std::printf("\nSDPA tile products (64 x 64 x 64), 1 thread, GFLOP/s\n\n");
    std::printf("| product | tile_gemm | OpenBLAS | oneDNN | Eigen |\n");
    std::printf("| --- | ---: | ---: | ---: | ---: |\n");
    const int n = 64;
    std::vector<float> q(n * n, 0.5f), k(n * n, 0.25f), s(n * n);
    const Shape tiles[] = {{n, n, n, false, true, "S = Q K^T"},
                           {n, n, n, false, false, "O += P V"},
                           {n, n, n, true, false, "dK += dS^T Q"}};
    for (const Shape& t : tiles) {
      std::vector<double> g = run_shape(t, libs, 2001);
      // tile_gemm reads B row by row: S = Q K^T runs on K^T, packed once per head by the kernel.
      const double gflop = 2.0 * n * n * n * 1e-6;
      g[0] = gflop / median_ms(
                         [&] {
                           tg::cpu::tile_gemm<float>(n, n, n, q.data(), t.ta ? 1 : n, t.ta ? n : 1,
                                                     k.data(), n, s.data(), n, !t.tb);
                         },
                         2001);
      print_row(t.what, g);
    }
    return 0;
  });
}
