// operator<< for tensors: shape, dtype, device, then the values (long dims summarized).
#include <iomanip>

#include "core/tensor.h"

namespace tg {

namespace {

constexpr int64_t kEdge = 3;  // values shown at each end of a long dim

void print_values(std::ostream& os, const std::vector<double>& v, const Shape& sizes,
                  const Shape& strides, size_t d, int64_t base, DType t) {
  if (d == sizes.size()) {
    if (t == kBool) {
      os << (v[base] != 0 ? "true" : "false");
    } else if (t == kInt64) {
      os << static_cast<int64_t>(v[base]);
    } else {
      os << std::setprecision(6) << v[base];
    }
    return;
  }
  os << "[";
  const int64_t n = sizes[d];
  for (int64_t i = 0; i < n; ++i) {
    if (n > 2 * kEdge + 1 && i == kEdge) {
      os << (d + 1 == sizes.size() ? ", ..." : ",\n" + std::string(d + 1, ' ') + "...");
      i = n - kEdge - 1;
      continue;
    }
    if (i) os << (d + 1 == sizes.size() ? ", " : ",\n" + std::string(d + 1, ' '));
    print_values(os, v, sizes, strides, d + 1, base + i * strides[d], t);
  }
  os << "]";
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  os << "tensor(shape=" << shape_str(t.sizes()) << ", dtype=" << t.dtype()
     << ", device=" << t.device();
  if (t.requires_grad()) os << ", requires_grad";
  os << ")\n";
  std::vector<double> v = t.to_vector<double>();
  print_values(os, v, t.sizes(), contiguous_strides(t.sizes()), 0, 0, t.dtype());
  return os;
}

}  // namespace tg
