// The SDPA kernel's three tile products (64 x 64 x 64, one thread), Eigen against OpenBLAS:
// why the CPU SDPA sends its tile GEMMs to OpenBLAS when the build has it.
//
//   bench_gemm_tiles
#include <cblas.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <class F>
double median_us(F&& f) {
  for (int i = 0; i < 100; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < 2001; ++i) {
    const double a = now_us();
    f();
    t.push_back(now_us() - a);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  openblas_set_num_threads(1);
  Eigen::setNbThreads(1);
  const int n = 64;
  Mat q = Mat::Random(n, n), k = Mat::Random(n, n), v = Mat::Random(n, n), s(n, n), acc(n, n);
  const double gflop = 2.0 * n * n * n / 1e3;  // per microsecond -> GFLOP/s
  struct Row {
    const char* name;
    double eigen, blas;
  };
  const Row rows[] = {
      {"S = Q K^T", median_us([&] { s.noalias() = q * k.transpose(); }), median_us([&] {
         cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.f, q.data(), n, k.data(),
                     n, 0.f, s.data(), n);
       })},
      {"O += P V", median_us([&] { acc.noalias() += s * v; }), median_us([&] {
         cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, s.data(), n, v.data(),
                     n, 1.f, acc.data(), n);
       })},
      {"dK += dS^T Q", median_us([&] { acc.noalias() += s.transpose() * q; }), median_us([&] {
         cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, n, n, 1.f, s.data(), n, q.data(),
                     n, 1.f, acc.data(), n);
       })},
  };
  std::printf(
      "| product (64x64x64, 1 thread) | Eigen us | Eigen GFLOP/s | OpenBLAS us | OpenBLAS GFLOP/s "
      "|\n");
  std::printf("| --- | ---: | ---: | ---: | ---: |\n");
  for (const Row& r : rows) {
    std::printf("| %s | %.2f | %.0f | %.2f | %.0f |\n", r.name, r.eigen, gflop / r.eigen, r.blas,
                gflop / r.blas);
  }
  return 0;
}
