// The values of small int64 tensors on the host, read from a device once per version: sdpa's
// ragged offsets and its paged tables are read on every call (each layer, forward and backward)
// to check them and to size the launch, index_copy_ checks its indices, and each read from a
// GPU waits for all the work queued before it, leaving the GPU idle until the host has queued
// more. Tensors made from host values keep them from the start (int64_to_device).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace tg::detail {

// t's int64 values in row-major order (t: int64, on any device). A CPU tensor is read each
// time; a device tensor's values are kept for later calls on the same storage, view and storage
// version (every in-place op bumps the version, as autograd's checks rely on), for a few
// tensors at a time. Only what the kept tensor's storage outlives is reused: an entry holds no
// memory of the device.
std::vector<int64_t> host_int64(const Tensor& t);

// `values` as an int64 tensor of `sizes` on `device`, whose values host_int64 then returns
// from this copy without reading the device (until the tensor is changed in place): for
// offsets and indices made on the host that later ops check there (a decoding step's offsets
// and cache slots, a packed batch's offsets).
Tensor int64_to_device(const std::vector<int64_t>& values, const Shape& sizes, Device device);

// Several such tensors in one copy to the device (each upload is a call the host makes and a
// copy the device queues): views of one tensor holding the values back to back, each of its
// part's shape, each keeping its values as above.
struct Int64Part {
  std::vector<int64_t> values;
  Shape sizes;
};
std::vector<Tensor> int64_to_device(const std::vector<Int64Part>& parts, Device device);

// t's int64 values where the host has them without reading a device: a CPU tensor's, or the
// values host_int64 keeps for a device tensor; else nothing.
std::optional<std::vector<int64_t>> known_int64(const Tensor& t);

// The smallest and largest of t's values (t: int64, at least one element), for range checks:
// from the kept values where host_int64 has them, else reduced on t's device and read back in
// one copy (one wait for the queued work, not one per figure).
struct Int64Range {
  int64_t lo = 0, hi = 0;
};
Int64Range host_range(const Tensor& t);

}  // namespace tg::detail
