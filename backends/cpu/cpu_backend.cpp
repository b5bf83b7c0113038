#include "backends/cpu/cpu_backend.h"

#include <Eigen/Core>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "backends/kernel_profile.h"
#include "core/tensor.h"

namespace tg {

Backend& cpu_backend() {
  static cpu::CpuBackend b;
  return b;
}

Backend& backend_for(Device d) {
  if (kernel_profiling()) return detail::profiling_backend(d);
  return d.is_cpu() ? cpu_backend() : cuda_backend(d.index);
}

void set_num_threads(int n) {
  TG_CHECK(n >= 1, "set_num_threads", "n must be >= 1, got ", n);
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
  Eigen::setNbThreads(n);
}

int get_num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace tg
