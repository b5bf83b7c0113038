#include "core/storage.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "core/error.h"

namespace tg {
namespace {

std::atomic<int64_t> g_live_count{0};
std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};

// Freed CPU blocks of 256 KiB and more, kept for the next request of the same size class.
// glibc maps a block of 32 MiB or more afresh on every allocation (its mmap threshold stops
// growing there) and unmaps it on free, and it gives the top of its heap back to the system
// when more than its trim threshold lies free there, so a tensor of either kind pays a page
// fault and a page clearing per 4 KiB the next time: cat's 32 MiB output took 7.9-8.9 ms in
// bench_ops on two Intel AVX-512 cores, 1.7-1.8 ms with its block kept here; the reference
// transformer's training step took about 4,400 page faults a step (17 MiB of fresh pages) with
// only blocks of 32 MiB kept, 3% of the step (docs/PERFORMANCE.md, session 58). Training and
// inference loops allocate the same sizes step after step. At most kCacheBytes are kept (the
// oldest blocks go first); release_free_memory() frees them all. AddressSanitizer builds keep
// nothing, so that it still sees every use after free.
class BlockCache {
 public:
  static constexpr size_t kMinBytes = size_t{256} << 10;
#if defined(__SANITIZE_ADDRESS__)
  static constexpr size_t kCacheBytes = 0;
#else
  static constexpr size_t kCacheBytes = size_t{256} << 20;
#endif
  // Sizes rounded up to a multiple of a sixteenth of the power of two at or below them (16 KiB
  // from 256 KiB, 2 MiB from 32 MiB), so that requests a little apart share blocks and a block
  // is at most 1/16 larger than asked.
  static size_t block_bytes(size_t bytes) {
    size_t step = kMinBytes / 16;
    while (step * 32 <= bytes) step *= 2;
    return (bytes + step - 1) / step * step;
  }

  void* take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    // The newest first: its pages are the likeliest still in the caches.
    for (size_t i = blocks_.size(); i-- > 0;) {
      if (blocks_[i].bytes != bytes) continue;
      void* p = blocks_[i].p;
      blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(i));
      kept_ -= bytes;
      return p;
    }
    return nullptr;
  }
  void keep(void* p, size_t bytes) {
    if (bytes > kCacheBytes) {
      std::free(p);
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    while (kept_ + bytes > kCacheBytes) {
      std::free(blocks_.front().p);
      kept_ -= blocks_.front().bytes;
      blocks_.erase(blocks_.begin());
    }
    blocks_.push_back({p, bytes});
    kept_ += bytes;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Block& b : blocks_) std::free(b.p);
    blocks_.clear();
    kept_ = 0;
  }

 private:
  struct Block {
    void* p;
    size_t bytes;
  };
  std::mutex mutex_;
  std::vector<Block> blocks_;  // oldest first
  size_t kept_ = 0;
};

// Never destroyed: tensors held by static objects may be freed after it would have been.
BlockCache& kept_blocks() {
  static auto* cache = new BlockCache;
  return *cache;
}

// 64-byte alignment so vectorized loops and Eigen maps start on a cache line.
struct CpuAllocator final : Allocator {
  void* allocate(size_t bytes, Device) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded >= BlockCache::kMinBytes) {
      rounded = BlockCache::block_bytes(rounded);
      if (void* p = kept_blocks().take(rounded)) return p;
    }
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!p) fail("alloc", "out of memory allocating ", bytes, " bytes on cpu");
    return p;
  }
  void deallocate(void* p, size_t bytes, Device) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded >= BlockCache::kMinBytes) {
      kept_blocks().keep(p, BlockCache::block_bytes(rounded));
    } else {
      std::free(p);
    }
  }
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
  kept_blocks().clear();
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}
int64_t peak_storage_bytes() { return g_peak_bytes.load(); }
void reset_peak_storage_bytes() { g_peak_bytes.store(g_live_bytes.load()); }

}  // namespace tg
