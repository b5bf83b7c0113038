// A device buffer shared by a tensor and all of its views, with the version counter that
// lets backward detect in-place changes to tensors it saved.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"

namespace tg {

// How a device gets and frees memory. CPU is built in; CUDA registers its own.
struct Allocator {
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes, Device device) = 0;
  virtual void deallocate(void* p, size_t bytes, Device device) = 0;
};
void set_allocator(DeviceType type, Allocator* alloc);
Allocator& allocator_for(Device d);

class Storage {
 public:
  Storage(size_t bytes, Device device);
  // Over `bytes` at `data`: memory that something else owns and keeps alive longer than this
  // storage (tg::dist's shared-memory windows). Never freed here, not counted as live storage.
  static std::shared_ptr<Storage> borrow(void* data, size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  Storage(void* data, size_t bytes, Device device)  // borrow's
      : data_(data), bytes_(bytes), device_(device), owned_(false) {}

  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  uint64_t version_ = 0;
  bool owned_ = true;
};

// Live storage on all devices, for leak tests and memory reports.
int64_t live_storage_count();
int64_t live_storage_bytes();
// High-water mark of live_storage_bytes since the last reset.
int64_t peak_storage_bytes();
void reset_peak_storage_bytes();

// Gives the C heap's free pages back to the system (glibc's malloc_trim; nothing elsewhere),
// and frees the CPU blocks of 256 KiB and more kept for reuse (at most 256 MiB; none under
// AddressSanitizer). Freed memory stays in the heap: phases that allocate buffers of many
// sizes (an evaluation's decoding, a checkpoint) can leave the resident set well above the
// training step's working set. The train CLI calls this after each evaluation and checkpoint
// (docs/PERFORMANCE.md).
void release_free_memory();

}  // namespace tg
