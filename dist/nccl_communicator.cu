// The NCCL engine of tg::dist for CUDA tensors: one NCCL communicator over the job's ranks on
// one device, its unique id made by rank 0 and sent to the others over the host engine (MPI).
// Every collective is queued on the device's stream (backends/cuda: every kernel of a device
// runs on its one stream), so it follows the kernels that wrote its buffer and precedes those
// that read it, and the host goes on at once. Errors, NCCL's own message included, become
// tg::Error.
#include <nccl.h>

#include <cstring>
#include <vector>

#include "backends/cuda/cuda_util.cuh"
#include "dist/device_communicator.h"

namespace tg::dist::detail {
namespace {

void check_nccl(ncclResult_t r, const char* what, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return;
  const char* last = ncclGetLastError(comm);
  fail("dist", what, ": NCCL error ", ncclGetErrorString(r),
       last && *last ? std::string(" (") + last + ")" : std::string());
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case kFloat32:
      return ncclFloat32;
    case kFloat64:
      return ncclFloat64;
    case kInt64:
      return ncclInt64;
    case kBool:
      return ncclUint8;  // one byte, 0 or 1: Max is "any"
    case kBFloat16:
    case kFloat16:
      break;  // dist.cpp reduces them as float32
  }
  fail("dist", "no NCCL datatype for ", dtype);
}

class NcclCommunicator final : public DeviceCommunicator {
 public:
  NcclCommunicator(Communicator& host, int device) : device_(device) {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (host.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    host.broadcast(&id, sizeof id, 0);
    cuda::enter(device);  // NCCL binds the communicator to the current device
    check_nccl(ncclCommInitRank(&comm_, host.size(), id, host.rank()), "ncclCommInitRank");
  }
  // The communicator is left to the process's end, not destroyed: tg::dist's state ends with the
  // program's static objects, after the CUDA runtime's own exit handlers have run, when
  // ncclCommDestroy could no longer reach the device.
  ~NcclCommunicator() override = default;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int device() const override { return device_; }

  void all_reduce(void* data, int64_t count, DType dtype, HostReduce op) override {
    cudaStream_t stream = begin();
    check_nccl(ncclAllReduce(data, data, static_cast<size_t>(count), nccl_type(dtype),
                             op == HostReduce::Max ? ncclMax : ncclSum, comm_, stream),
               "ncclAllReduce", comm_);
  }

  void broadcast(void* data, int64_t bytes, int root) override {
    cudaStream_t stream = begin();
    check_nccl(
        ncclBroadcast(data, data, static_cast<size_t>(bytes), ncclUint8, root, comm_, stream),
        "ncclBroadcast", comm_);
  }

  void all_gather(const void* send, void* recv, int64_t bytes) override {
    cudaStream_t stream = begin();
    check_nccl(ncclAllGather(send, recv, static_cast<size_t>(bytes), ncclUint8, comm_, stream),
               "ncclAllGather", comm_);
  }

 private:
  // The device's stream, current; an error that an earlier collective met on the device (a
  // peer gone, say) is reported here, at the next one, rather than never.
  cudaStream_t begin() {
    ncclResult_t async = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError", comm_);
    check_nccl(async, "an earlier NCCL collective", comm_);
    return cuda::enter(device_);
  }

  int device_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

bool nccl_built() { return true; }

std::optional<std::pair<int, int>> ranks_sharing_a_gpu(Communicator& host, int device) {
  cuda::enter(device);  // checks the index
  cudaDeviceProp prop;
  TG_CUDA(cudaGetDeviceProperties(&prop, device));
  constexpr int64_t kBytes = sizeof prop.uuid.bytes;
  std::vector<char> all(static_cast<size_t>(kBytes * host.size()));
  host.all_gather(prop.uuid.bytes, all.data(), kBytes);
  for (int a = 0; a < host.size(); ++a)
    for (int b = a + 1; b < host.size(); ++b)
      if (std::memcmp(all.data() + a * kBytes, all.data() + b * kBytes, kBytes) == 0)
        return std::make_pair(a, b);
  return std::nullopt;
}

std::unique_ptr<DeviceCommunicator> make_nccl_communicator(Communicator& host, int device) {
  return std::make_unique<NcclCommunicator>(host, device);
}

}  // namespace tg::dist::detail
