// wgmma_probe.h on a GPU (built for sm_90a alone: tests/CMakeLists.txt).
#include <cuda_runtime.h>

#include "tests/wgmma_probe_kernel.cuh"

namespace tgtest::wgmma_probe {
namespace {
// Whether the current device has compute capability 9.0 (the products' sm_90a code runs there).
bool hopper() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;
}
}  // namespace

bool run(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, Result& out) {
  if (!hopper()) return false;
  S *da = nullptr, *db = nullptr;
  float *dss = nullptr, *drs = nullptr, *dhalf = nullptr, *drk = nullptr;
  const size_t in = kM * kK * sizeof(S);
  cudaMalloc(&da, in);
  cudaMalloc(&db, in);
  cudaMalloc(&dss, kM * kM * sizeof(float));
  cudaMalloc(&drs, kM * kK * sizeof(float));
  cudaMalloc(&dhalf, kM * kHalf * sizeof(float));
  cudaMalloc(&drk, kM * kM * sizeof(float));
  cudaMemcpy(da, a.data(), in, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), in, cudaMemcpyHostToDevice);
  cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(kSmem));
  probe_kernel<<<1, 128, kSmem>>>(da, db, dss, drs, dhalf, drk);
  out.ss.assign(kM * kM, 0.0f);
  out.rs.assign(kM * kK, 0.0f);
  out.rs_half.assign(kM * kHalf, 0.0f);
  out.rs_k.assign(kM * kM, 0.0f);
  const bool ok = cudaDeviceSynchronize() == cudaSuccess &&
                  cudaMemcpy(out.ss.data(), dss, kM * kM * sizeof(float), cudaMemcpyDeviceToHost) ==
                      cudaSuccess &&
                  cudaMemcpy(out.rs.data(), drs, kM * kK * sizeof(float), cudaMemcpyDeviceToHost) ==
                      cudaSuccess &&
                  cudaMemcpy(out.rs_half.data(), dhalf, kM * kHalf * sizeof(float),
                             cudaMemcpyDeviceToHost) == cudaSuccess &&
                  cudaMemcpy(out.rs_k.data(), drk, kM * kM * sizeof(float),
                             cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(da);
  cudaFree(db);
  cudaFree(dss);
  cudaFree(drs);
  cudaFree(dhalf);
  cudaFree(drk);
  if (!ok) out.ss.clear();  // the caller's check fails on the sizes
  return true;
}

bool run_tf32(const std::vector<float>& a, const std::vector<float>& b, Tf32Result& out,
              bool split) {
  if (!hopper()) return false;
  float *da = nullptr, *db = nullptr, *dss = nullptr, *drs = nullptr;
  cudaMalloc(&da, a.size() * sizeof(float));
  cudaMalloc(&db, b.size() * sizeof(float));
  cudaMalloc(&dss, kM * kTf32N * sizeof(float));
  cudaMalloc(&drs, kM * kM * sizeof(float));
  cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice);
  const auto kernel = split ? probe_tf32_kernel<true> : probe_tf32_kernel<false>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(kTf32Smem));
  kernel<<<1, 128, kTf32Smem>>>(da, db, dss, drs);
  out.ss.assign(kM * kTf32N, 0.0f);
  out.rs.assign(kM * kM, 0.0f);
  const bool ok = cudaDeviceSynchronize() == cudaSuccess &&
                  cudaMemcpy(out.ss.data(), dss, kM * kTf32N * sizeof(float),
                             cudaMemcpyDeviceToHost) == cudaSuccess &&
                  cudaMemcpy(out.rs.data(), drs, kM * kM * sizeof(float), cudaMemcpyDeviceToHost) ==
                      cudaSuccess;
  cudaFree(da);
  cudaFree(db);
  cudaFree(dss);
  cudaFree(drs);
  if (!ok) out.ss.clear();  // the caller's check fails on the sizes
  return true;
}

}  // namespace tgtest::wgmma_probe
