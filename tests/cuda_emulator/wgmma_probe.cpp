// wgmma_probe.h on the CPU emulator: the same kernel source, host memory.
#include "tests/cuda_emulator/cuda_shim.h"

namespace tgtest::wgmma_probe {
namespace {
alignas(1024) unsigned char smem[tg::cuda_emulator::kEmulatedSharedArray];
const bool registered = tg::cuda_emulator::register_shared(smem, sizeof smem);
}  // namespace
}  // namespace tgtest::wgmma_probe

#include "tests/wgmma_probe_kernel.cuh"

namespace tgtest::wgmma_probe {

bool run(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, Result& out) {
  out.ss.assign(kM * kM, 0.0f);
  out.rs.assign(kM * kK, 0.0f);
  out.rs_half.assign(kM * kHalf, 0.0f);
  out.rs_k.assign(kM * kM, 0.0f);
  const auto* pa = reinterpret_cast<const S*>(a.data());
  const auto* pb = reinterpret_cast<const S*>(b.data());
  tg::cuda_emulator::launch(1, 128, kSmem, [&] {
    probe_kernel(pa, pb, out.ss.data(), out.rs.data(), out.rs_half.data(), out.rs_k.data());
  });
  return true;
}

bool run_tf32(const std::vector<float>& a, const std::vector<float>& b, Tf32Result& out,
              bool split) {
  out.ss.assign(kM * kTf32N, 0.0f);
  out.rs.assign(kM * kM, 0.0f);
  tg::cuda_emulator::launch(1, 128, kTf32Smem, [&] {
    if (split) {
      probe_tf32_kernel<true>(a.data(), b.data(), out.ss.data(), out.rs.data());
    } else {
      probe_tf32_kernel<false>(a.data(), b.data(), out.ss.data(), out.rs.data());
    }
  });
  return true;
}

}  // namespace tgtest::wgmma_probe
