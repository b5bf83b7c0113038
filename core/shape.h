// Shapes, strides and broadcasting: the index arithmetic every layer shares.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tg {

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape& sizes);
Shape contiguous_strides(const Shape& sizes);
std::string shape_str(const Shape& s);  // "[2, 3]"

// Wraps a possibly negative dim into [0, ndim); throws "[op] dim ..." when out of range.
int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op);

// NumPy broadcasting of two shapes; throws "[op] shapes ... are not broadcastable".
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Strides that view a tensor of (sizes, strides) as `target` (stride 0 on broadcast dims).
// Requires sizes to be broadcastable to target.
Shape broadcast_strides(const Shape& sizes, const Shape& strides, const Shape& target);

}  // namespace tg
