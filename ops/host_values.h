// The values of small int64 tensors on the host, read from a device once per version: sdpa's
// ragged offsets and its paged tables are read on every call (each layer, forward and backward)
// to check them and to size the launch, and each read from a GPU waits for all the work queued
// before it, leaving the GPU idle until the host has queued more.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tg::detail {

// t's int64 values in row-major order (t: int64, on any device). A CPU tensor is read each
// time; a device tensor's values are kept for later calls on the same storage, view and storage
// version (every in-place op bumps the version, as autograd's checks rely on), for a few
// tensors at a time. Only what the kept tensor's storage outlives is reused: an entry holds no
// memory of the device.
std::vector<int64_t> host_int64(const Tensor& t);

}  // namespace tg::detail
