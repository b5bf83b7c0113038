// A build without NCCL: collectives of CUDA tensors are staged through host memory.
#include "core/error.h"
#include "dist/device_communicator.h"

namespace tg::dist::detail {

bool nccl_built() { return false; }

std::optional<std::pair<int, int>> ranks_sharing_a_gpu(Communicator&, int) { return std::nullopt; }

std::unique_ptr<DeviceCommunicator> make_nccl_communicator(Communicator&, int) {
  fail("dist", "this build has no NCCL (TAPEGRAD_NCCL)");
}

}  // namespace tg::dist::detail
