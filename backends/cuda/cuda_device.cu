// CUDA devices: discovery, one context per device (stream + cuBLAS handle), the caching
// allocator that device storage comes from, error translation, and the backend instances.
//
// A machine without a driver makes cudaGetDeviceCount return an error rather than 0: both
// read as "no device".
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda_api.h"
#include "core/storage.h"

namespace tg {
namespace cuda {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  fail("cuda", what, ": ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")");
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  fail("cuda", what, ": cuBLAS error ", cublasGetStatusString(s), " (", cublasGetStatusName(s),
       ")");
}

void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

namespace {

int device_count_or_zero() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the error: no driver or no device means no CUDA here
    return 0;
  }
  return n;
}

void check_index(int device) {
  const int n = device_count_or_zero();
  TG_CHECK(n > 0, "cuda", "no CUDA device is available on this machine");
  TG_CHECK(device >= 0 && device < n, "cuda", "device index ", device, " is out of range: ", n,
           " CUDA device(s) present");
}

struct Context {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
};

std::mutex g_ctx_mutex;
std::map<int, Context> g_contexts;

Context& context(int device) {
  std::lock_guard<std::mutex> lock(g_ctx_mutex);
  auto it = g_contexts.find(device);
  if (it != g_contexts.end()) return it->second;
  check_index(device);
  TG_CUDA(cudaSetDevice(device));
  Context c;
  TG_CUDA(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
  check_cublas(cublasCreate(&c.blas), "cublasCreate");
  check_cublas(cublasSetStream(c.blas, c.stream), "cublasSetStream");
  return g_contexts.emplace(device, c).first->second;
}

// Device memory is cached by rounded size and handed out again without cudaMalloc, the way
// PyTorch's caching allocator does in spirit: a training step asks for the same sizes every
// step, so after the first step no allocation reaches the driver. All work of a device runs
// on its one stream, so a block freed by one kernel and reused by a later one is ordered.
struct CachingAllocator final : Allocator {
  struct PerDevice {
    std::map<size_t, std::vector<void*>> free;  // rounded size -> cached blocks
    int64_t in_use = 0, cached = 0, peak = 0, mallocs = 0;
  };
  std::mutex mutex;
  std::map<int, PerDevice> devices;
  bool poison = false;  // fill every block handed out with 0xFF bytes (NaN floats)

  static size_t round(size_t bytes) {
    const size_t kSmall = 512, kLarge = size_t(2) << 20;  // 512 B steps below 1 MiB, 2 MiB above
    const size_t step = bytes < (size_t(1) << 20) ? kSmall : kLarge;
    return (bytes + step - 1) / step * step + (bytes == 0 ? step : 0);
  }

  void* allocate(size_t bytes, Device d) override {
    context(d.index);  // checks the device, creates its stream
    const size_t size = round(bytes);
    std::lock_guard<std::mutex> lock(mutex);
    PerDevice& pd = devices[d.index];
    void* p = nullptr;
    auto it = pd.free.find(size);
    if (it != pd.free.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      pd.cached -= static_cast<int64_t>(size);
    } else {
      TG_CUDA(cudaSetDevice(d.index));
      cudaError_t e = cudaMalloc(&p, size);
      if (e == cudaErrorMemoryAllocation) {  // give the cache back to the driver, try again
        cudaGetLastError();
        release(d.index, pd);
        e = cudaMalloc(&p, size);
      }
      if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        fail("cuda", "out of memory allocating ", bytes, " bytes on cuda:", d.index, " (",
             pd.in_use, " bytes in use by tensors)");
      }
      check(e, "cudaMalloc");
      ++pd.mallocs;
    }
    pd.in_use += static_cast<int64_t>(size);
    if (pd.in_use > pd.peak) pd.peak = pd.in_use;
    if (poison) TG_CUDA(cudaMemsetAsync(p, 0xFF, size, enter(d.index)));
    return p;
  }

  void deallocate(void* p, size_t bytes, Device d) override {
    const size_t size = round(bytes);
    std::lock_guard<std::mutex> lock(mutex);
    PerDevice& pd = devices[d.index];
    pd.free[size].push_back(p);
    pd.in_use -= static_cast<int64_t>(size);
    pd.cached += static_cast<int64_t>(size);
  }

  // Frees every cached block of a device (mutex held). Waits for the device first: a cached
  // block may still be read by queued kernels.
  static void release(int device, PerDevice& pd) {
    cudaSetDevice(device);
    cudaDeviceSynchronize();
    for (auto& [size, blocks] : pd.free)
      for (void* p : blocks) cudaFree(p);
    pd.free.clear();
    pd.cached = 0;
  }
};

CachingAllocator& caching_allocator() {
  // Never destroyed: tensors in static storage may be freed after main returns.
  static CachingAllocator* a = [] {
    auto* p = new CachingAllocator;
    set_allocator(DeviceType::CUDA, p);
    return p;
  }();
  return *a;
}

// Registers the allocator before main, so that the first CUDA tensor finds it.
const bool g_registered = (caching_allocator(), true);

}  // namespace

cudaStream_t enter(int device) {
  Context& c = context(device);
  int current = -1;
  cudaGetDevice(&current);
  if (current != device) TG_CUDA(cudaSetDevice(device));
  return c.stream;
}

cublasHandle_t cublas_handle(int device) { return context(device).blas; }

Scratch::Scratch(size_t bytes, int device) : bytes_(bytes), device_(device) {
  data_ = caching_allocator().allocate(bytes, Device(DeviceType::CUDA, device));
}
Scratch::~Scratch() {
  caching_allocator().deallocate(data_, bytes_, Device(DeviceType::CUDA, device_));
}

void CudaBackend::to_host(const void* src, void* dst, size_t bytes) {
  if (!bytes) return;
  cudaStream_t s = enter(device);
  TG_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
  TG_CUDA(cudaStreamSynchronize(s));
}

namespace {

// Host-to-device copies of up to kStaged bytes go through pinned staging slots, kSlot bytes
// at a time: the bytes are staged and the copies queued, and from_host returns without waiting.
// A synchronous copy waited for every kernel queued before it and left the GPU idle until the
// host had queued more (a packed training step's offsets, positions and tables made such waits
// every step; a batch's ids above 64 KiB, or a long decoding cache's key rows, still did). The
// slots are used in turn; a slot is refilled once its last copy has run (its event), so a
// host that runs ahead of the device by more than the slots waits for the oldest.
struct Staging {
  static constexpr size_t kSlot = size_t(64) << 10;
  static constexpr int kSlots = 32;
  static constexpr size_t kStaged = kSlot * (kSlots / 2);  // 1 MiB: larger ones are waited for
  std::mutex mutex;
  char* host = nullptr;  // kSlots * kSlot pinned bytes, never freed (as the allocator's cache)
  cudaEvent_t copied[kSlots] = {};
  int next = 0;
};

Staging& staging(int device) {
  static std::mutex m;
  static std::map<int, Staging*> all;  // never destroyed: copies may be queued at exit
  std::lock_guard<std::mutex> lock(m);
  Staging*& st = all[device];
  if (!st) {
    auto fresh = std::make_unique<Staging>();
    TG_CUDA(cudaMallocHost(&fresh->host, Staging::kSlots * Staging::kSlot));
    for (cudaEvent_t& e : fresh->copied)
      TG_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    st = fresh.release();
  }
  return *st;
}

}  // namespace

// The host buffer may be freed as soon as this returns: copies up to 1 MiB are staged (above),
// larger ones waited for.
void CudaBackend::from_host(const void* src, void* dst, size_t bytes) {
  if (!bytes) return;
  cudaStream_t s = enter(device);
  if (bytes <= Staging::kStaged) {
    Staging& st = staging(device);
    std::lock_guard<std::mutex> lock(st.mutex);
    for (size_t done = 0; done < bytes; done += Staging::kSlot) {
      const size_t n = std::min(Staging::kSlot, bytes - done);
      const int slot = st.next;
      st.next = (slot + 1) % Staging::kSlots;
      TG_CUDA(cudaEventSynchronize(st.copied[slot]));  // returns at once if never recorded
      char* staged = st.host + static_cast<size_t>(slot) * Staging::kSlot;
      std::memcpy(staged, static_cast<const char*>(src) + done, n);
      TG_CUDA(
          cudaMemcpyAsync(static_cast<char*>(dst) + done, staged, n, cudaMemcpyHostToDevice, s));
      TG_CUDA(cudaEventRecord(st.copied[slot], s));
    }
    return;
  }
  TG_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
  TG_CUDA(cudaStreamSynchronize(s));
}

}  // namespace cuda

bool cuda_is_available() { return cuda::device_count_or_zero() > 0; }
int cuda_device_count() { return cuda::device_count_or_zero(); }

Backend& cuda_backend(int device) {
  static std::mutex m;
  static std::map<int, std::unique_ptr<cuda::CudaBackend>> backends;
  std::lock_guard<std::mutex> lock(m);
  auto it = backends.find(device);
  if (it != backends.end()) return *it->second;
  cuda::check_index(device);
  cuda::caching_allocator();
  return *backends.emplace(device, std::make_unique<cuda::CudaBackend>(device)).first->second;
}

void cuda_synchronize(int device) { TG_CUDA(cudaStreamSynchronize(cuda::enter(device))); }

void cuda_empty_cache() {
  cuda::CachingAllocator& a = cuda::caching_allocator();
  std::lock_guard<std::mutex> lock(a.mutex);
  for (auto& [device, pd] : a.devices) cuda::CachingAllocator::release(device, pd);
}

void cuda_poison_allocations(bool on) {
  cuda::CachingAllocator& a = cuda::caching_allocator();
  std::lock_guard<std::mutex> lock(a.mutex);
  a.poison = on;
}

CudaMemoryStats cuda_memory_stats(int device) {
  cuda::CachingAllocator& a = cuda::caching_allocator();
  std::lock_guard<std::mutex> lock(a.mutex);
  auto it = a.devices.find(device);
  if (it == a.devices.end()) return {};
  const auto& pd = it->second;
  return {pd.in_use, pd.cached, pd.peak, pd.mallocs};
}

}  // namespace tg
