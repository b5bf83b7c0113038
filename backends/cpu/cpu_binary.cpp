// Binary elementwise ops on strided CPU views: one loop per op of elementwise_ops.def and input
// dtype (apart from cpu_elementwise.cpp, so that the two files compile side by side).
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/elementwise_loops.h"
#include "backends/scalar_ops.h"

namespace tg::cpu {
namespace {

using namespace elementwise_loops;

// The binary ops whose float32 unit-stride runs (and 16-bit blocks) evaluate their functors on
// whole simd vectors of floats, as cpu_elementwise.cpp's kVectorUnary: logaddexp (its composite's
// nine passes took 10.1-12.3 ms over 4M float32 on two Intel AVX-512 cores, one pass 2.1) and the
// backward formulas that hold an exp.
template <class Fn>
constexpr bool kVectorBinary = (std::is_same_v<Fn, scalar::binary_fn::LogAddExp> ||
                                std::is_same_v<Fn, scalar::binary_fn::SiluBackward> ||
                                std::is_same_v<Fn, scalar::binary_fn::SoftplusBackward> ||
                                std::is_same_v<Fn, scalar::binary_fn::LogSigmoidBackward>);

// The binary op on float vectors where it has that form (kVectorBinary), else nullptr: for the
// float32 loops and the 16-bit blocks.
template <class Fn>
auto binary_on_vectors(Fn fn) {
  if constexpr (kVectorBinary<Fn>) {
    return [fn](simd::Vec<float> u, simd::Vec<float> v) { return fn(u, v); };
  } else {
    (void)fn;
    return nullptr;
  }
}

}  // namespace

void CpuBackend::binary(BinaryOp op, const View& a, const View& b, const View& out) {
  scalar::visit_typed(op, a.dtype, "binary", [&](auto fn, auto t) {
    using T = decltype(t);
    using C = compute_t<T>;
    using To = scalar::stored_t<decltype(fn), T>;
    const auto f = [fn](T u, T v) { return scalar::apply_binary(fn, u, v); };
    const auto ff = [fn](C u, C v) { return fn(u, v); };
    const auto vf = binary_on_vectors(fn);
    if constexpr (kHalfBlocks<T, decltype(vf)>) {
      map2_half<To, T>(a, b, out, f, ff, vf);
    } else if constexpr (std::is_same_v<T, float>) {
      map2<To, T>(a, b, out, f, vf);
    } else {
      map2<To, T>(a, b, out, f);
    }
  });
}

}  // namespace tg::cpu
