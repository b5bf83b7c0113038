// What the tensor-core SDPA suites share (test_cuda_sdpa_mma.cpp on a GPU, test_cuda_emulated.cpp
// on the CPU emulator): random configurations over every option of DESIGN §4 and the kernels'
// tile widths, and their comparison with the CPU.
//
// Tolerances. The CPU reads the 16-bit inputs, computes in float32 and rounds each result once.
// The kernels multiply the same 16-bit inputs exactly with float32 sums, but round P (and dS)
// to the 16-bit type before the second product of each pair, as FlashAttention-2 does, and
// their backward reads their own output O (rowsum(dO * O)), itself within a rounding of the
// CPU's. Each result element is a sum of terms; its error is a few units u of the 16-bit type
// (2^-8 bfloat16, 2^-11 float16) times the sum of those terms' magnitudes (term_magnitudes()),
// not times the result: a score gradient dS = P (dP - rowsum(dO * O)) cancels to nothing where
// a row sees one key, and so does a mask gradient summed along a row, while the rounding of
// their terms does not. Per element: 4u of the magnitudes for the output, 8u for the
// gradients; float32-level for the statistics (no 16-bit rounding).
#pragma once
#include <tapegrad.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "test_util.h"

namespace sdpamma {

using tg::Device;
using tg::DType;
using tg::SdpaGrads;
using tg::SdpaOptions;
using tg::SdpaResult;
using tg::Shape;
using tg::Tensor;

// A setting (kGet / kSet) changed for a scope and restored after it.
template <class T, auto kGet, auto kSet>
struct Scoped {
  T was = kGet();
  explicit Scoped(T value) { kSet(value); }
  ~Scoped() { kSet(was); }
  Scoped(const Scoped&) = delete;
  Scoped& operator=(const Scoped&) = delete;
};
using WarpRows = Scoped<int, tg::cuda_sdpa_warp_rows, tg::set_cuda_sdpa_warp_rows>;
using TensorCores = Scoped<bool, tg::cuda_sdpa_tensor_cores, tg::set_cuda_sdpa_tensor_cores>;
using Deterministic = Scoped<bool, tg::cuda_sdpa_deterministic, tg::set_cuda_sdpa_deterministic>;
using Wgmma = Scoped<std::string, tg::cuda_sdpa_wgmma, tg::set_cuda_sdpa_wgmma>;
using DeterministicDq =
    Scoped<std::string, tg::cuda_sdpa_deterministic_dq, tg::set_cuda_sdpa_deterministic_dq>;

// The unit of the kernels' error relative to the terms' magnitudes: the 16-bit types' unit
// roundoff; for float32 on the tensor cores, 3xTF32's: a = hi + lo + e with |e| <= 2^-22 |a|,
// and each product drops lo lo and the two e terms, 3 x 2^-22 of |a b|, so 2^-20. The CPU's
// own float32 sums (here the reference, unlike for 16 bits) are of the same order: sqrt(n)
// 2^-24 for n = 256 terms is 2^-20. On a GPU's tensor cores it holds up to head dim 64 only;
// compare_config scales it above (why: there).
double unit(DType dt);
// The same for results whose widest rows (max(Dqk, Dv)) are `width` wide, as compare_config
// allows on a GPU (float32 grows in proportion above head dim 64: why there).
double unit(DType dt, int64_t width);

// |result - cpu| <= tol times the largest |cpu| element.
void check_close(const std::string& what, const Tensor& cpu, const Tensor& result, double tol);

// |result - cpu| <= tol * bound + floor element by element (both zero where the bound and the
// floor are: rows that see no key); the worst element is reported. floor undefined: 0.
void check_bounded(const std::string& what, const Tensor& cpu, const Tensor& result,
                   const Tensor& bound, double tol, const Tensor& floor = Tensor());

struct Magnitudes {
  Tensor out, dq, dk, dv, dmask;
};

// The CPU's probabilities P of float64 q and k under options o (after dropout, when o has it),
// (B, Hq, Sq, Skv).
Tensor probabilities(const Tensor& q, const Tensor& k, SdpaOptions o);

// For each result element, the sum of the magnitudes of the terms it is made of, from the
// 16-bit inputs (as float64), the CPU options o and p, probabilities() without dropout.
Magnitudes term_magnitudes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                           const SdpaOptions& o, const Tensor& p);
// What rounding near zero adds, in absolute terms, where float16's relative unit does not hold:
// its subnormals (below 2^-14) are 2^-24 apart, so a result there, or a P or dS factor the
// kernels round to float16 before a product, may be off by up to half that whatever its
// magnitude (a random sweep's float16 dV of 5.4e-7 against the CPU's 6.0e-7, one spacing apart).
// Per result element: both sides' rounding of it, plus half a spacing times the sum of the
// other factor's magnitudes over the keys (rows, for dK and dV) the row sees. Undefined tensors
// (no allowance) for the other dtypes.
Magnitudes subnormal_allowance(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& dout, const SdpaOptions& o, const Tensor& p, DType dt);

// Contiguous; (B, S, H, D) storage seen as (B, H, S, D) (16-byte copies still apply); or one
// element past a 16-byte boundary with an odd row stride (element loads).
enum class Layout { Contiguous, Strided, Misaligned };

// x (float64, CPU) in dtype dt on `device`, laid out as `layout` says.
Tensor place(const Tensor& x, DType dt, Layout layout, Device device);

struct Config {
  int64_t B = 1, Hq = 1, Hk = 1, Sq = 1, Skv = 1, Dqk = 8, Dv = 8;
  SdpaOptions opts;
  Shape mask_shape;  // empty: no mask
  bool bool_mask = false;
  Layout layout = Layout::Contiguous;
};

// Shapes across the kernels' tile widths (32, 64, 128, 256 forward; the backward above 128
// widens to float32) and across several 64-row tiles; every option of DESIGN §4.
Config random_config(std::mt19937_64& rng);
// c without the options that rule out the warpgroup-product kernels (wgmma_forward): no mask,
// ALiBi, softcap or dropout, a positive scale, head dims up to 128.
Config plain_config(Config c);
std::string describe(const Config& c);

// Forward and backward on the implementation under test, of inputs placed on its device.
using RunSdpa = std::function<std::pair<SdpaResult, SdpaGrads>(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const SdpaOptions& o)>;

// Forward and backward of configuration c in dtype dt on the CPU and by `run` (inputs on
// `device`), compared at the tolerances above.
void compare_config(const Config& c, DType dt, uint64_t seed, std::mt19937_64& rng, Device device,
                    const RunSdpa& run);

// Scores near 10^9 and 10^12 (softmax scales 1e9 and 1e12), in float32 and bfloat16 on
// mma.sync and bfloat16 on warpgroup products: out within 4 units of the CPU's (each row's
// probabilities are one-hot there, so out is its top key's value row), stats within 1e-5, and
// every gradient finite (their values carry the rounding of products recomputed in another
// order: ops/sdpa.h).
void check_huge_scores(Device device, const RunSdpa& run);

}  // namespace sdpamma
