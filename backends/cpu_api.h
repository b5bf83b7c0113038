// The CPU entry points a user calls directly: which library runs the matrix products, and
// what the CPU kernels were built for (benchmarks print both).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tg {

// The library behind the CPU's float32 matrix products: "onednn", "openblas" or "eigen".
// The default is chosen once per process: the environment variable TAPEGRAD_CPU_GEMM when
// set, else oneDNN on a CPU with AVX-512 (where it runs about 1.8x OpenBLAS 0.3.21, whose
// kernels stop at AVX2 on AMD Zen 4/5), else OpenBLAS, else oneDNN, else Eigen, among the
// libraries this build has. float64 products never go to oneDNN (it has no dgemm): they take
// OpenBLAS when the build has it, else Eigen.
std::string cpu_gemm();
// The libraries this build can use, "eigen" always among them.
std::vector<std::string> cpu_gemm_choices();
// Chooses one of cpu_gemm_choices() for the rest of the process (benchmarks, tests); any
// other name is an error.
void set_cpu_gemm(const std::string& name);
// Whether bfloat16 matrix products multiply in bfloat16 with float32 sums (oneDNN's matmul:
// about twice its float32 rate) rather than in float32 on widened copies: true where
// cpu_gemm() is "onednn" and oneDNN may use the CPU's AVX512_BF16 or AMX instructions
// (ONEDNN_MAX_CPU_ISA=AVX512_CORE, for one, forbids them). float16 products always widen.
bool cpu_gemm_bf16_native();

// Whether bfloat16 and float16 SDPA multiply on AMX's tile units (Intel Xeon from Sapphire
// Rapids on) rather than in float32 FMAs on widened values: q, k, v and dO exactly (float16 as
// two bfloat16 terms), with float32 sums, and the float32 P and dS as two bfloat16 terms each
// (16 significant bits, where FlashAttention-2 rounds them to the 16-bit type), so results stay
// within about 2^-16 of the FMA kernels'. It applies where a head has more than 64 query rows
// (fewer, as in decoding, keep the FMA kernels). True on a CPU with AMX-BF16 whose kernels were
// built for AVX-512, unless the environment variable TAPEGRAD_CPU_SDPA_AMX is "0" or
// set_cpu_sdpa_amx(false) was called; set_cpu_sdpa_amx(true) cannot turn it on where there is
// no AMX. float32 and float64 always take the FMA kernels. The backward recomputes the forward's
// scores bit for bit only when the setting is the same for both (scores of 10^8 and more need
// that).
bool cpu_sdpa_amx();
void set_cpu_sdpa_amx(bool on);
// Whether a bfloat16 or float16 SDPA with len_q query rows a head runs on AMX: cpu_sdpa_amx()
// and more than 64 of them. The kernels and the double backward (which then takes the
// statistics again) decide by it alike.
bool cpu_sdpa_on_amx(int64_t len_q);

// The vector instruction set the CPU kernels were compiled for: "AVX-512", "AVX2", "AVX" or
// "SSE2" (TAPEGRAD_NATIVE=ON compiles for the build machine's own).
const char* cpu_isa();
// The processor's model name from /proc/cpuinfo ("unknown" where there is none).
std::string cpu_model();

}  // namespace tg
