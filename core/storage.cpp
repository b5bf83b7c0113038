#include "core/storage.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <atomic>
#include <cstdlib>
#include <new>

#include "core/error.h"

namespace tg {
namespace {

std::atomic<int64_t> g_live_count{0};
std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};

// 64-byte alignment so vectorized loops and Eigen maps start on a cache line.
struct CpuAllocator final : Allocator {
  void* allocate(size_t bytes, Device) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!p) fail("alloc", "out of memory allocating ", bytes, " bytes on cpu");
    return p;
  }
  void deallocate(void* p, size_t, Device) override { std::free(p); }
};

Allocator* g_allocators[2] = {nullptr, nullptr};

}  // namespace

void set_allocator(DeviceType type, Allocator* alloc) {
  g_allocators[static_cast<int>(type)] = alloc;
}

Allocator& allocator_for(Device d) {
  static CpuAllocator cpu;
  if (d.is_cpu()) return g_allocators[0] ? *g_allocators[0] : cpu;
  Allocator* a = g_allocators[static_cast<int>(d.type)];
  TG_CHECK(a != nullptr, "alloc", "device ", d,
           " has no allocator in this build: the CUDA backend is not available");
  return *a;
}

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  data_ = allocator_for(device).allocate(bytes, device);
  g_live_count.fetch_add(1, std::memory_order_relaxed);
  int64_t now = g_live_bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed) +
                static_cast<int64_t>(bytes);
  int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !g_peak_bytes.compare_exchange_weak(peak, now)) {
  }
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t bytes, Device device) {
  return std::shared_ptr<Storage>(new Storage(data, bytes, device));
}

Storage::~Storage() {
  if (!owned_) return;
  allocator_for(device_).deallocate(data_, bytes_, device_);
  g_live_count.fetch_sub(1, std::memory_order_relaxed);
  g_live_bytes.fetch_sub(static_cast<int64_t>(bytes_), std::memory_order_relaxed);
}

int64_t live_storage_count() { return g_live_count.load(); }
int64_t live_storage_bytes() { return g_live_bytes.load(); }

void release_free_memory() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}
int64_t peak_storage_bytes() { return g_peak_bytes.load(); }
void reset_peak_storage_bytes() { g_peak_bytes.store(g_live_bytes.load()); }

}  // namespace tg
