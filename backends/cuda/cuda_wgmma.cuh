// Warpgroup products on sm_90 (wgmma.mma_async, PTX ISA "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate"), for the tensor-core SDPA's kernels on an H100: four warps (a
// warpgroup, 128 threads) multiply a 64-row A by a shared-memory B of N columns at 16 k values a
// step, float32 sums. The operands in shared memory are described by 64-bit descriptors
// (wgmma_layout.h); A may instead come from registers, in mma.m16n8k16's A layout for each
// warp's 16 rows (warp w of the group: rows 16 w .. 16 w + 15). The accumulators are held as
// mma.m16n8's C tiles: warp w's rows, d[i] the 16 x 8 tile of columns 8 i .. 8 i + 7
// (cuda_mma.cuh), so the SDPA's fragment code reads them unchanged.
//
// The products run asynchronously: fence() before the first of a batch (it orders the
// registers' earlier writes), commit() after the last, wait<N>() until at most N batches are in
// flight; the accumulators and A's registers are not to be touched in between. Shared memory
// written by ordinary stores or cp.async must be made visible to them by fence_async_shared()
// in each writing thread before the barrier that publishes it.
//
// These need sm_90a (architecture-specific features): the files that use them are compiled for
// it alone (CMakeLists.txt), and the host launches their kernels on compute capability 9.0 only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_mma.cuh"
#include "backends/cuda/wgmma_layout.h"

namespace tg::cuda::wgmma {

#ifndef TG_CUDA_EMULATION

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TG_WGMMA_ARCH 1
#else
#define TG_WGMMA_ARCH 0
#endif

// The 32 accumulator registers of an m64n64 product, as asm operand names.
#define TG_WGMMA_D64                                                                          \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19," \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
// The 64 accumulator registers of an m64n128 product, as asm operand names.
#define TG_WGMMA_D128                                                                         \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19," \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37," \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55," \
  "%56, %57, %58, %59, %60, %61, %62, %63"
// The 128 accumulator registers of an m64n256 product, as asm operand names.
#define TG_WGMMA_D256                                                                           \
  TG_WGMMA_D128                                                                                 \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81," \
  "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99,"   \
  "%100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114,"   \
  "%115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
// Operand lists: the accumulators of d[N / 8][4] in order.
#define TG_WGMMA_F4(d, i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define TG_WGMMA_F64(d)                                                                          \
  TG_WGMMA_F4(d, 0), TG_WGMMA_F4(d, 1), TG_WGMMA_F4(d, 2), TG_WGMMA_F4(d, 3), TG_WGMMA_F4(d, 4), \
      TG_WGMMA_F4(d, 5), TG_WGMMA_F4(d, 6), TG_WGMMA_F4(d, 7)
#define TG_WGMMA_F128(d)                                                                         \
  TG_WGMMA_F64(d), TG_WGMMA_F4(d, 8), TG_WGMMA_F4(d, 9), TG_WGMMA_F4(d, 10), TG_WGMMA_F4(d, 11), \
      TG_WGMMA_F4(d, 12), TG_WGMMA_F4(d, 13), TG_WGMMA_F4(d, 14), TG_WGMMA_F4(d, 15)
#define TG_WGMMA_F256(d)                                                              \
  TG_WGMMA_F128(d), TG_WGMMA_F4(d, 16), TG_WGMMA_F4(d, 17), TG_WGMMA_F4(d, 18),       \
      TG_WGMMA_F4(d, 19), TG_WGMMA_F4(d, 20), TG_WGMMA_F4(d, 21), TG_WGMMA_F4(d, 22), \
      TG_WGMMA_F4(d, 23), TG_WGMMA_F4(d, 24), TG_WGMMA_F4(d, 25), TG_WGMMA_F4(d, 26), \
      TG_WGMMA_F4(d, 27), TG_WGMMA_F4(d, 28), TG_WGMMA_F4(d, 29), TG_WGMMA_F4(d, 30), \
      TG_WGMMA_F4(d, 31)

// The k step and types of a product after its m64nN: 16-bit (`type` "bf16" or "f16", k 16) or
// TF32 (k 8).
#define TG_WGMMA_K16(type) "k16.f32." type "." type
#define TG_WGMMA_TF32 "k8.f32.tf32.tf32"
// d (+)= A B, A and B in shared memory (K-major both), KIND as above, MODES the operands after
// the scales (16-bit: the two transposes, ", 0, 0"; none for TF32), A_, B_ and ACC_ the operand
// names after the accumulators' (d is overwritten where acc is 0).
#define TG_WGMMA_SS(N, KIND, MODES, A_, B_, ACC_, d, a, b, acc)               \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " ACC_                       \
               ", 0;\n"                                                       \
               "wgmma.mma_async.sync.aligned.m64n" #N KIND " {" TG_WGMMA_D##N \
               "}, " A_ ", " B_ ", p, 1, 1" MODES ";\n}\n"                    \
               : TG_WGMMA_F##N(d)                                             \
               : "l"(a), "l"(b), "r"(acc))
// d (+)= A B, A from registers (A0_ .. A0_ + 3 its operand names), B in shared memory; MODES
// for 16 bits B's transpose: MN-major ", 1" or K-major ", 0" (none for TF32: K-major).
#define TG_WGMMA_RS(N, KIND, MODES, A0_, A1_, A2_, A3_, B_, ACC_, d, a, b, acc)          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " ACC_                                  \
               ", 0;\n"                                                                  \
               "wgmma.mma_async.sync.aligned.m64n" #N KIND " {" TG_WGMMA_D##N            \
               "}, {" A0_ ", " A1_ ", " A2_ ", " A3_ "}, " B_ ", p, 1, 1" MODES ";\n}\n" \
               : TG_WGMMA_F##N(d)                                                        \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc))

__device__ __forceinline__ void fence() {
#if TG_WGMMA_ARCH
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void commit() {
#if TG_WGMMA_ARCH
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int kPending>
__device__ __forceinline__ void wait() {
#if TG_WGMMA_ARCH
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}
// Pins the accumulators in place for the compiler: no access to them moves across this point
// (before fence(), so that earlier writes are done; after wait(), so that reads wait for it), as
// CUTLASS's warpgroup_fence_operand does. The products' asm statements name the registers, the
// fence and wait do not.
template <int kTiles>
__device__ __forceinline__ void fence_operand(float (&d)[kTiles][4]) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
  }
}

// Makes this thread's writes to shared memory (stores, completed cp.async copies) visible to
// the products, which read through the async proxy.
__device__ __forceinline__ void fence_async_shared() {
#if TG_WGMMA_ARCH
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Named barrier `id` (1-15; 0 is __syncthreads') of `count` threads (whole warps): named_sync
// waits until `count` have arrived, named_arrive counts this warp and goes on. Shared-memory
// accesses before either are seen by the threads that pass the barrier's phase.
__device__ __forceinline__ void named_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// A warpgroup's registers a thread from here on (setmaxnreg, sm_90a): raised for the groups
// that multiply, lowered for one that only copies, within the block's launch share.
template <int kRegisters>
__device__ __forceinline__ void raise_registers() {
#if TG_WGMMA_ARCH
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}
template <int kRegisters>
__device__ __forceinline__ void lower_registers() {
#if TG_WGMMA_ARCH
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}

// The shared address of p, as descriptors hold it.
__device__ __forceinline__ uint32_t shared_address(const void* p) { return mma::smem_address(p); }

// d (+)= A B for a warpgroup: A (64 x 16, this group's rows) and B (16 x kN) K-major in shared
// memory, described by a and b; accumulate false overwrites d.
template <class S, int kN>
__device__ __forceinline__ void product_ss(float (&d)[kN / 8][4], uint64_t a, uint64_t b,
                                           bool accumulate) {
#if TG_WGMMA_ARCH
  const uint32_t acc = accumulate ? 1u : 0u;
  constexpr bool kBf16 = std::is_same_v<S, __nv_bfloat16>;
  if constexpr (kN == 64) {
    if constexpr (kBf16) {
      TG_WGMMA_SS(64, TG_WGMMA_K16("bf16"), ", 0, 0", "%32", "%33", "%34", d, a, b, acc);
    } else {
      TG_WGMMA_SS(64, TG_WGMMA_K16("f16"), ", 0, 0", "%32", "%33", "%34", d, a, b, acc);
    }
  } else {
    static_assert(kN == 128, "product_ss: 64 or 128 columns");
    if constexpr (kBf16) {
      TG_WGMMA_SS(128, TG_WGMMA_K16("bf16"), ", 0, 0", "%64", "%65", "%66", d, a, b, acc);
    } else {
      TG_WGMMA_SS(128, TG_WGMMA_K16("f16"), ", 0, 0", "%64", "%65", "%66", d, a, b, acc);
    }
  }
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// d (+)= A B for a warpgroup: A (64 x 16) from registers (this warp's 16 rows, mma.m16n8k16's A
// fragment), B (16 x kN, kN 64, 128 or 256) in shared memory, MN-major (kMnMajorB: transposed
// by the hardware, as V in O = P V) or K-major (as K in S = Q K^T), described by b; accumulate
// false overwrites d.
template <class S, int kN, bool kMnMajorB>
__device__ __forceinline__ void product_rs_any(float (&d)[kN / 8][4], const uint32_t (&a)[4],
                                               uint64_t b, bool accumulate) {
#if TG_WGMMA_ARCH
  const uint32_t acc = accumulate ? 1u : 0u;
  constexpr bool kBf16 = std::is_same_v<S, __nv_bfloat16>;
#define TG_WGMMA_RS_TYPES(N, ...)                                           \
  if constexpr (kBf16 && kMnMajorB) {                                       \
    TG_WGMMA_RS(N, TG_WGMMA_K16("bf16"), ", 1", __VA_ARGS__, d, a, b, acc); \
  } else if constexpr (kBf16) {                                             \
    TG_WGMMA_RS(N, TG_WGMMA_K16("bf16"), ", 0", __VA_ARGS__, d, a, b, acc); \
  } else if constexpr (kMnMajorB) {                                         \
    TG_WGMMA_RS(N, TG_WGMMA_K16("f16"), ", 1", __VA_ARGS__, d, a, b, acc);  \
  } else {                                                                  \
    TG_WGMMA_RS(N, TG_WGMMA_K16("f16"), ", 0", __VA_ARGS__, d, a, b, acc);  \
  }
  if constexpr (kN == 64) {
    TG_WGMMA_RS_TYPES(64, "%32", "%33", "%34", "%35", "%36", "%37")
  } else if constexpr (kN == 128) {
    TG_WGMMA_RS_TYPES(128, "%64", "%65", "%66", "%67", "%68", "%69")
  } else {
    static_assert(kN == 256, "product_rs: 64, 128 or 256 columns");
    TG_WGMMA_RS_TYPES(256, "%128", "%129", "%130", "%131", "%132", "%133")
  }
#undef TG_WGMMA_RS_TYPES
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// d += A B, B MN-major (O += P V, dQ += dS K, dV += P^T dO, dK += dS^T Q).
template <class S, int kN>
__device__ __forceinline__ void product_rs(float (&d)[kN / 8][4], const uint32_t (&a)[4],
                                           uint64_t b) {
  product_rs_any<S, kN, true>(d, a, b, true);
}
// d (+)= A B, B K-major (S = Q K^T and dP = dO V^T with Q and dO held in registers).
template <class S, int kN>
__device__ __forceinline__ void product_rs_kmajor(float (&d)[kN / 8][4], const uint32_t (&a)[4],
                                                  uint64_t b, bool accumulate) {
  product_rs_any<S, kN, false>(d, a, b, accumulate);
}

// TF32 products (float32 operands, the low 13 bits of each mantissa ignored; k = 8 a step,
// whose 32 bytes a row span what a 16-bit step's do, so the same descriptors serve), for a
// 3xTF32 SDPA on warpgroup products. TF32 has no transposed form: A and B are both K-major.
// A from registers holds mma.m16n8k8's TF32 A fragment for the warp's 16 rows (a0 row g column
// t, a1 row g + 8, a2 and a3 the same rows at column t + 4; CUTLASS's ALayout_64x8).

// d (+)= A B in TF32: A (64 x 8) and B (8 x kN, kN 64 or 128) K-major in shared memory.
template <int kN>
__device__ __forceinline__ void product_ss_tf32(float (&d)[kN / 8][4], uint64_t a, uint64_t b,
                                                bool accumulate) {
#if TG_WGMMA_ARCH
  const uint32_t acc = accumulate ? 1u : 0u;
  if constexpr (kN == 64) {
    TG_WGMMA_SS(64, TG_WGMMA_TF32, "", "%32", "%33", "%34", d, a, b, acc);
  } else {
    static_assert(kN == 128, "product_ss_tf32: 64 or 128 columns");
    TG_WGMMA_SS(128, TG_WGMMA_TF32, "", "%64", "%65", "%66", d, a, b, acc);
  }
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// d (+)= A B in TF32: A (64 x 8) from registers (float32 bits), B (8 x kN, kN 64 or 128)
// K-major in shared memory.
template <int kN>
__device__ __forceinline__ void product_rs_tf32(float (&d)[kN / 8][4], const uint32_t (&a)[4],
                                                uint64_t b, bool accumulate) {
#if TG_WGMMA_ARCH
  const uint32_t acc = accumulate ? 1u : 0u;
  if constexpr (kN == 64) {
    TG_WGMMA_RS(64, TG_WGMMA_TF32, "", "%32", "%33", "%34", "%35", "%36", "%37", d, a, b, acc);
  } else {
    static_assert(kN == 128, "product_rs_tf32: 64 or 128 columns");
    TG_WGMMA_RS(128, TG_WGMMA_TF32, "", "%64", "%65", "%66", "%67", "%68", "%69", d, a, b, acc);
  }
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

#endif  // TG_CUDA_EMULATION

}  // namespace tg::cuda::wgmma
