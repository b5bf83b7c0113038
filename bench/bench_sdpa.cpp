// SDPA benchmark: forward and forward+backward of tg::sdpa against tg::sdpa_reference (the
// same function composed from primitive ops), then peak memory at long sequences.
//
//   bench_sdpa [threads] [cpu|cuda|memory|options|decode] [--precision fp32|bf16|fp16]   (or
//   --device cuda)
// options: the CPU at (4, 8, 256, 64) with one option of DESIGN §4 at a time (window 64 with
// causal, ALiBi, softcap 30, dropout 0.1, a float mask, a bool mask), beside the plain case.
// decode: the CPU's forward alone (no gradient) for one or four query rows a head against a long
// cache of keys, as a decoding step runs it, with the rate at which it reads K and V.
// On CUDA: the shapes of the SDPA-on-CUDA and tensor-core issues (GQA and head dim 256
// among them), each timed run ending with a device sync. --precision sets q, k, v's dtype;
// on CUDA, 16-bit inputs run on the tensor cores (TAPEGRAD_CUDA_SDPA_TENSOR_CORES=0: the float32
// kernels on widened copies).
// TAPEGRAD_BENCH_SDPA_CASES=text runs only the cases whose name holds it (say S8192_D128, to
// profile one shape's kernels with Nsight Compute; the memory cases are named memory_S<S>), or,
// when it ends with '$', whose name ends with the text before it (B4_Hq8_Hk8_S256_D64$: not
// the causal case).
// TAPEGRAD_BENCH_SDPA_REFERENCE=0 leaves sdpa_reference untimed (its columns print nan): the
// compare scripts' alternated rounds time tapegrad's kernel alone, a case at a time.
// TAPEGRAD_BENCH_SDPA_PAIRED=1 (or =forward) times one forward+backward (one forward) at a time
// on request, for compare_sdpa_torch.py --paired and compare_sdpa_builds.py: a selected case
// prints "ready <name>" after a warm-up, then runs once for each line read from stdin and prints
// its ms, until stdin ends (so with stdin empty, every selected case just warms up and names
// itself: how the scripts list the cases).
// Prints one tab-separated line per case:
//   name fwd_ms fwdbwd_ms ref_fwd_ms ref_fwdbwd_ms fwd_gflops fwdbwd_gflops
// for the memory cases "mem S tensor_peak_MiB rss_growth_MiB", for the decoding ones
// "decode name fwd_ms kv_GB/s" (name decode_B<b>_Hq<hq>_Hk<hk>_Sq<sq>_Skv<skv>_D<d>).
// bench/compare_sdpa_torch.py runs this beside PyTorch's scaled_dot_product_attention.
#include <sys/resource.h>

#include <tapegrad.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "bench_args.h"

namespace {

tg::Device g_device = tg::kCPU;
tg::DType g_dtype = tg::kFloat32;

// body(), then a wait for the device when it runs there.
void run_synced(const std::function<void()>& body) {
  body();
  if (g_device.is_cuda()) tg::cuda_synchronize();
}

// The ms of one run_synced(body).
double once_ms(const std::function<void()>& body) {
  const auto a = std::chrono::steady_clock::now();
  run_synced(body);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
}

double time_ms(const std::function<void()>& body, int reps) {
  run_synced(body);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(once_ms(body));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// TAPEGRAD_BENCH_SDPA_PAIRED: "1" or "forward" when cases serve runs on request (serve_steps),
// and nothing else runs; "" otherwise.
std::string paired() {
  const char* p = std::getenv("TAPEGRAD_BENCH_SDPA_PAIRED");
  const std::string mode = p ? p : "";
  return mode == "1" || mode == "forward" ? mode : "";
}

// One timed run of body (after a warm-up) for each line on stdin, its ms printed on a line of its
// own, until stdin ends: the other side of a comparison runs between two of them, so that each
// pair of times is taken within milliseconds on a machine whose speed moves minute to minute.
void serve_steps(const std::string& name, const std::function<void()>& body) {
  run_synced(body);
  std::printf("ready\t%s\n", name.c_str());
  std::fflush(stdout);
  char line[64];
  while (std::fgets(line, sizeof line, stdin)) {
    std::printf("%.3f\n", once_ms(body));
    std::fflush(stdout);
  }
}

struct Case {
  int64_t B, Hq, Hk, S, D;
  bool causal;
  std::string option = "";  // or one more option of DESIGN §4 (run_options)
};

// The options beyond causal, one at a time: their cost over the plain kernel.
void apply_option(const Case& c, tg::SdpaOptions& o, tg::Generator& gen) {
  if (c.option == "window64") o.window = 64;
  if (c.option == "alibi") o.alibi = true;
  if (c.option == "softcap") o.softcap = 30;
  if (c.option == "dropout") {
    o.dropout_p = 0.1;
    o.seed = 1;
  }
  if (c.option == "floatmask") o.mask = tg::randn({1, 1, c.S, c.S}, gen).to(g_dtype).to(g_device);
  if (c.option == "boolmask") o.mask = tg::gt(tg::randn({1, 1, c.S, c.S}, gen), -1.0).to(g_device);
}

// Whether TAPEGRAD_BENCH_SDPA_CASES, when set, lets the case of this name run: the name holds
// its text, or ends with it when the text ends with '$'.
bool selected(const std::string& name) {
  const char* only = std::getenv("TAPEGRAD_BENCH_SDPA_CASES");
  if (!only) return true;
  std::string text = only;
  if (!text.empty() && text.back() == '$') {
    text.pop_back();
    return name.ends_with(text);
  }
  return name.find(text) != std::string::npos;
}

std::string case_name(const Case& c) {
  std::string name = "B" + std::to_string(c.B) + "_Hq" + std::to_string(c.Hq) + "_Hk" +
                     std::to_string(c.Hk) + "_S" + std::to_string(c.S) + "_D" + std::to_string(c.D);
  if (c.causal) name += "_causal";
  if (!c.option.empty()) name += "_" + c.option;
  return name;
}

void run_case(const Case& c) {
  const std::string name = case_name(c);
  if (!selected(name)) return;
  tg::Generator gen{1, 0};
  auto make = [&](int64_t H) {
    return tg::randn({c.B, H, c.S, c.D}, gen).to(g_dtype).to(g_device).requires_grad_();
  };
  tg::Tensor q = make(c.Hq), k = make(c.Hk), v = make(c.Hk);
  tg::Tensor dout = tg::randn({c.B, c.Hq, c.S, c.D}, gen).to(g_dtype).to(g_device);
  tg::SdpaOptions o;
  o.causal = c.causal;
  apply_option(c, o, gen);
  // One forward, or one forward+backward, of attention f (sdpa or its reference).
  auto forward = [&](auto f) -> std::function<void()> {
    return [&, f] {
      tg::NoGradGuard ng;
      f(q, k, v, o);
    };
  };
  auto forward_backward = [&](auto f) -> std::function<void()> {
    return [&, f] { tg::grad({f(q, k, v, o).out}, {q, k, v}, {dout}); };
  };
  auto ours = [](auto&... a) { return tg::sdpa(a...); };
  auto ref = [](auto&... a) { return tg::sdpa_reference(a...); };
  if (const std::string mode = paired(); !mode.empty()) {
    serve_steps(name, mode == "forward" ? forward(ours) : forward_backward(ours));
    return;
  }
  const int reps = c.S >= 1024 ? 3 : 5;
  const char* reference = std::getenv("TAPEGRAD_BENCH_SDPA_REFERENCE");
  const bool with_reference = !reference || std::string(reference) != "0";
  const double nan = std::numeric_limits<double>::quiet_NaN();
  double f = time_ms(forward(ours), reps), fb = time_ms(forward_backward(ours), reps);
  double rf = with_reference ? time_ms(forward(ref), reps) : nan;
  double rfb = with_reference ? time_ms(forward_backward(ref), reps) : nan;
  // FLOPs: 2 GEMMs forward (4 B H S^2 D), 5 in backward; causal halves both.
  double flops = 4.0 * c.B * c.Hq * c.S * c.S * c.D * (c.causal ? 0.5 : 1.0);
  std::printf("%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t%.1f\n", name.c_str(), f, fb, rf, rfb,
              flops / f * 1e-6, 3.5 * flops / fb * 1e-6);
  std::fflush(stdout);
}

// A decoding step's attention: Sq query rows a head against Skv cached keys, forward only.
void run_decode(int64_t B, int64_t Hq, int64_t Hk, int64_t Sq, int64_t Skv, int64_t D) {
  const std::string name = "decode_B" + std::to_string(B) + "_Hq" + std::to_string(Hq) + "_Hk" +
                           std::to_string(Hk) + "_Sq" + std::to_string(Sq) + "_Skv" +
                           std::to_string(Skv) + "_D" + std::to_string(D);
  if (!selected(name)) return;
  tg::Generator gen{3, 0};
  tg::Tensor q = tg::randn({B, Hq, Sq, D}, gen).to(g_dtype);
  tg::Tensor k = tg::randn({B, Hk, Skv, D}, gen).to(g_dtype);
  tg::Tensor v = tg::randn({B, Hk, Skv, D}, gen).to(g_dtype);
  const tg::SdpaOptions o;
  const double ms = time_ms(
      [&] {
        tg::NoGradGuard ng;
        tg::sdpa(q, k, v, o);
      },
      20);
  const double kv_bytes = 2.0 * B * Hk * Skv * D * static_cast<double>(tg::dtype_size(g_dtype));
  std::printf("decode\t%s\t%.3f\t%.1f\n", name.c_str(), ms, kv_bytes / ms * 1e-6);
  std::fflush(stdout);
}

long rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// Peak tensor storage and process high-water growth of one forward+backward at length S,
// beyond the inputs and outputs themselves.
void run_memory(int64_t S) {
  if (!paired().empty() || !selected("memory_S" + std::to_string(S))) return;
  tg::Generator gen{2, 0};
  tg::Tensor q = tg::randn({1, 1, S, 64}, gen).requires_grad_();
  tg::Tensor k = tg::randn({1, 1, S, 64}, gen).requires_grad_();
  tg::Tensor v = tg::randn({1, 1, S, 64}, gen).requires_grad_();
  tg::Tensor dout = tg::randn({1, 1, S, 64}, gen);
  tg::SdpaOptions o;
  o.causal = true;
  const int64_t base = tg::live_storage_bytes();
  tg::reset_peak_storage_bytes();
  const long rss0 = rss_kib();
  auto g = tg::grad({tg::sdpa(q, k, v, o).out}, {q, k, v}, {dout});
  const double io = 4.0 * S * 64 * 4;  // out, dq, dk, dv: the results themselves
  std::printf("mem\t%lld\t%.2f\t%.2f\n", static_cast<long long>(S),
              (tg::peak_storage_bytes() - base - io) / 1048576.0, (rss_kib() - rss0) / 1024.0);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  return bench::guarded_main([&] {
    const bench::Args args = bench::parse_args("bench_sdpa", argc, argv, 1,
                                               {"cpu", "cuda", "memory", "options", "decode"});
    tg::set_num_threads(args.number(0, "threads", 2));
    bench::print_machine();
    g_dtype = args.precision_dtype();
    if (args.device == "cuda") {
      g_device = tg::kCUDA;
      std::printf(
          "cuda_sdpa\ttensor cores %s, warp rows %d (0: automatic), dQ %s, warpgroup products "
          "%s\n",
          tg::cuda_sdpa_tensor_cores() ? "on" : "off", tg::cuda_sdpa_warp_rows(),
          tg::cuda_sdpa_deterministic() ? ("deterministic, " + tg::cuda_sdpa_deterministic_dq() +
                                           " (pass or fixed-point sums)")
                                              .c_str()
                                        : "summed by the dK/dV pass (atomic adds)",
          tg::cuda_sdpa_wgmma().c_str());
      for (bool causal : {false, true}) {
        run_case({4, 16, 16, 2048, 64, causal});
        run_case({1, 8, 8, 8192, 128, causal});
        run_case({2, 16, 16, 2048, 256, causal});
        run_case({4, 32, 8, 2048, 128, causal});  // GQA, 4 query heads per key/value head
      }
      return 0;
    }
    if (args.device == "options") {  // (4, 8, 256, 64) with each option on its own, CPU
      for (const char* opt :
           {"", "window64", "alibi", "softcap", "dropout", "floatmask", "boolmask"})
        run_case({4, 8, 8, 256, 64, std::string(opt) == "window64", opt});
      return 0;
    }
    if (args.device == "decode") {  // the CPU: query heads 4 to a kv head, and 1 to 1
      run_decode(8, 32, 8, 1, 4096, 128);
      run_decode(8, 32, 32, 1, 2048, 128);
      run_decode(1, 32, 8, 1, 8192, 128);
      run_decode(8, 32, 8, 4, 4096, 128);  // four rows a head (speculative decoding)
      return 0;
    }
    if (args.device == "cpu") {
      for (bool causal : {false, true}) {
        run_case({4, 8, 8, 256, 64, causal});
        run_case({1, 8, 8, 1024, 64, causal});
        run_case({8, 8, 2, 128, 32, causal});
      }
    }
    run_memory(4096);
    run_memory(16384);
    return 0;
  });
}
