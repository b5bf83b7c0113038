#include "core/shape.h"

#include <sstream>

#include "core/error.h"

namespace tg {

int64_t numel_of(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    // A wrapped product would be a silently wrong element count (2^64 wraps to 0).
    TG_CHECK(!__builtin_mul_overflow(n, s, &n), "numel", "shape ", shape_str(sizes),
             " has more elements than an int64 can count");
  }
  return n;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape st(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    acc *= sizes[i] > 0 ? sizes[i] : 1;
  }
  return st;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t lo = ndim > 0 ? -ndim : -1, hi = ndim > 0 ? ndim - 1 : 0;
  TG_CHECK(dim >= lo && dim <= hi, op, "dim ", dim, " is out of range for a tensor of rank ", ndim,
           " (expected a dim in [", lo, ", ", hi, "])");
  return dim < 0 ? dim + (ndim > 0 ? ndim : 1) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TG_CHECK(x == y || x == 1 || y == 1, op, "shapes ", shape_str(a), " and ", shape_str(b),
             " are not broadcastable (dim ", i, ": ", x, " vs ", y, ")");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

Shape broadcast_strides(const Shape& sizes, const Shape& strides, const Shape& target) {
  Shape out(target.size(), 0);
  size_t lead = target.size() - sizes.size();
  for (size_t i = 0; i < sizes.size(); ++i)
    out[lead + i] = (sizes[i] == 1 && target[lead + i] != 1) ? 0 : strides[i];
  return out;
}

}  // namespace tg
