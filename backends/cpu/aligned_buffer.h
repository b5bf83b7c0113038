// Scratch memory of the tiled CPU kernels: aligned to the widest vector, grown on demand and
// never shrunk, so a thread's tiles are allocated once per kernel call.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>

namespace tg::cpu {

template <class T>
class Buffer {
 public:
  T* get(int64_t n) {
    if (n > size_) {
      const size_t bytes = (static_cast<size_t>(n) * sizeof(T) + 63) / 64 * 64;
      data_.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
      if (!data_) throw std::bad_alloc();
      size_ = n;
#ifndef NDEBUG
      // Debug builds (the sanitizer tests) start from NaN, so a read of a tile element that
      // was never written shows up in the results instead of passing by luck.
      std::fill(data_.get(), data_.get() + n, std::numeric_limits<T>::quiet_NaN());
#endif
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  int64_t size_ = 0;
};

}  // namespace tg::cpu
