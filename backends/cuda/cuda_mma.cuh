// Tensor-core building blocks for sm_80 and later, as PTX: the warp-wide 16 x 8 x 16 product
// (mma.sync, 16-bit inputs, float32 sums) and the 16 x 8 x 8 one on float32 split into TF32
// halves, ldmatrix (8 x 8 tiles of 16-bit values from shared memory into the fragments mma
// expects; float rows read as pairs of them) and cp.async (16-byte global -> shared copies
// that run while the warp computes). The fragment layouts are PTX ISA's "Matrix fragments for
// mma.m16n8k16"; with g = lane / 4 and t = lane % 4:
//   A (16 x 16, row-major), four registers of two values: a0 row g, columns 2t, 2t + 1; a1 row
//     g + 8, same columns; a2, a3 the same rows at columns 2t + 8, 2t + 9;
//   B (16 x 8, k x n), two registers: b0 rows (k) 2t, 2t + 1 of column (n) g; b1 rows 2t + 8,
//     2t + 9;
//   C, D (16 x 8, float32): c0, c1 row g, columns 2t, 2t + 1; c2, c3 row g + 8.
// So a C tile pair (columns 16 kk .. 16 kk + 15) is, rounded to 16 bits, the A fragment of
// k-step kk of the next product: FlashAttention-2's P stays in registers.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace tg::cuda::mma {

// The PTX itself. The CPU emulator of tests/cuda_emulator compiles the kernels with its own
// versions of these (its mma.h), from the fragment layouts above.
#ifndef TG_CUDA_EMULATION

// The kernels that use these compile for sm_80 and sm_90 only (CMAKE_CUDA_ARCHITECTURES);
// an older target compiles them to a trap, and the host never launches them there.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define TG_MMA_ARCH 1
#else
#define TG_MMA_ARCH 0
#endif

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 tiles of 16-bit values: lanes 8 m .. 8 m + 7 give the row addresses of tile m
// (16-byte aligned), r[m] receives it as row g, columns 2t, 2t + 1 (with trans: column g, rows
// 2t, 2t + 1).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
#if TG_MMA_ARCH
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
#else
  __trap();
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
#if TG_MMA_ARCH
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
#else
  __trap();
#endif
}

// d += A B by one mma.sync `instr` (a string literal naming shape and types) of four A
// registers and two B registers, the float32 accumulators updated in place.
#define TG_MMA_SYNC_F32(instr, d, a, b0, b1)                                              \
  asm volatile(instr " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))

// d += A B for one 16 x 8 x 16 tile, S the 16-bit input type.
template <class S>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
#if TG_MMA_ARCH
  if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    TG_MMA_SYNC_F32("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", d, a, b0, b1);
  } else {
    static_assert(std::is_same_v<S, __half>, "mma_16816: bfloat16 or float16 inputs");
    TG_MMA_SYNC_F32("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", d, a, b0, b1);
  }
#else
  __trap();
#endif
}

// d += A B for one 16 x 8 x 8 tile of TF32 values.
__device__ __forceinline__ void mma_1688_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                              uint32_t b1) {
#if TG_MMA_ARCH
  TG_MMA_SYNC_F32("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", d, a, b0, b1);
#else
  __trap();
#endif
}

// Copies 16 bytes from global to shared memory asynchronously; with !valid it writes 16 zero
// bytes and reads nothing (src must still be a valid address).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
#if TG_MMA_ARCH
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(bytes));
#else
  __trap();
#endif
}
// The same for 4 bytes (cp.async.ca: the 16-byte .cg form has no smaller size).
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
#if TG_MMA_ARCH
  const int bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(bytes));
#else
  __trap();
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if TG_MMA_ARCH
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if TG_MMA_ARCH
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

// 2^x on the multi-function unit alone (ex2.approx.ftz): exp2f also handles results below
// 2^-126 (subnormals), with a compare and two predicated multiplies around the same
// instruction, in the loops that compute every probability. Such a probability is 0 here,
// beside the row's largest, which is 1: nothing a float32 sum would keep. -inf gives 0.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The smaller of x and y, NaN where either is (min.NaN: fminf would return the other). One
// instruction where a comparison and a select take two.
__device__ __forceinline__ float min_nan(float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float z;
  asm("min.NaN.f32 %0, %1, %2;\n" : "=f"(z) : "f"(x), "f"(y));
  return z;
#else
  return x > y || y != y ? y : x;
#endif
}

// p[0] += x and p[1] += y in global memory, each atomically (red.global.add: blocks add to the
// same sums in whatever order they run); one 8-byte vector add from sm_90 on, where p must be
// 8-byte aligned.
__device__ __forceinline__ void atomic_add2(float* p, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(x, y));
#else
  atomicAdd(p, x);
  atomicAdd(p + 1, y);
#endif
}
__device__ __forceinline__ void atomic_add(float* p, float x) { atomicAdd(p, x); }
// *p += x in 64-bit integers, atomically: the same sum in any order (two's complement: signed
// counts added as unsigned).
__device__ __forceinline__ void atomic_add_u64(unsigned long long* p, unsigned long long x) {
  atomicAdd(p, x);
}

#endif  // TG_CUDA_EMULATION

// float32 on the tensor cores: x = hi + lo, then A B = A_hi B_hi + A_hi B_lo + A_lo B_hi (the
// dropped A_lo B_lo is below float32's roundoff): about float32's accuracy at three TF32
// products ("3xTF32"). float32's kernels split every fragment they multiply, so the split is
// written for few instructions: three (IADD3, LOP3, FADD in sm_90's SASS), where two cvt.rna.tf32
// and the subtraction took eight, five of them integer operations, of which Hopper issues half
// as many a clock as float ones (scripts/mma_sass_counts.py --dtype float: 36-46% fewer
// instructions per tile in the kernels' main loops).
// - hi is x rounded to TF32, to nearest with ties away from zero: half a TF32 unit added to x's
//   bits, the 13 bits below TF32's then cut. This is cvt.rna's rounding without its guard of
//   infinities and NaN (the guard is not needed: see below).
// - lo = x - hi is exact (|lo| <= 2^-11 |x|) and goes to the tensor cores as it is: they read a
//   float32 register as TF32 by ignoring its low 13 bits (the emulator's mma.h does the same;
//   CUTLASS's FastF32 3xTF32 products also hand them one of the halves unrounded). Cut toward
//   zero, lo loses less than 2^-10 |lo| <= 2^-21 |x|, where a second cvt.rna lost 2^-22 |x|: a
//   product A B is now off by at most about 2^-19.7 |A| |B|, against 2^-21.4.
// - Not finite: an infinite x gives hi = x and lo = NaN (as cvt.rna did), a NaN x a NaN lo (hi
//   may be anything), so every product that takes them is NaN, as x's would be.
struct SplitTf32 {
  uint32_t hi, lo;
};
__device__ __forceinline__ SplitTf32 split_tf32(float x) {
  const uint32_t hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  return {hi, __float_as_uint(x - __uint_as_float(hi))};
}

// A float32 fragment (registers holding float bits) split into its TF32 halves.
template <int kN>
struct SplitFragment {
  uint32_t hi[kN], lo[kN];
};
template <int kN>
__device__ __forceinline__ SplitFragment<kN> split_fragment(const uint32_t (&x)[kN]) {
  SplitFragment<kN> f;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const SplitTf32 s = split_tf32(__uint_as_float(x[i]));
    f.hi[i] = s.hi;
    f.lo[i] = s.lo;
  }
  return f;
}

// d += A B to about float32 accuracy: three TF32 products, the small ones first.
__device__ __forceinline__ void mma_1688_3xtf32(float (&d)[4], const SplitFragment<4>& a,
                                                const SplitFragment<2>& b) {
  mma_1688_tf32(d, a.lo, b.hi[0], b.hi[1]);
  mma_1688_tf32(d, a.hi, b.lo[0], b.lo[1]);
  mma_1688_tf32(d, a.hi, b.hi[0], b.hi[1]);
}

// Two floats rounded to S and packed as one register, `lo` in the low half (the lower column).
// The memcpy reads the pair's 4 bytes: __nv_bfloat162 and __half2 are two 16-bit values with
// user-written copy operators (so not TriviallyCopyable to clang-tidy), and the toolkit's own
// headers reinterpret their storage the same way.
template <class S>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&r, &v, sizeof r);  // NOLINT(bugprone-undefined-memory-manipulation)
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&r, &v, sizeof r);  // NOLINT(bugprone-undefined-memory-manipulation)
  }
  return r;
}

}  // namespace tg::cuda::mma
