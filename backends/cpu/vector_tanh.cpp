#include "backends/cpu/vector_tanh.h"

#include <Eigen/Core>

namespace tg::cpu {

void tanh_of_scaled(const float* s, float cap, float* t, int64_t n) {
  using Array = Eigen::Array<float, Eigen::Dynamic, 1>;
  Eigen::Map<Array>(t, n) = (Eigen::Map<const Array>(s, n) / cap).tanh();
}

}  // namespace tg::cpu
