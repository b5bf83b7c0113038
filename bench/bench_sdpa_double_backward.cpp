// SDPA double backward: the gradients of <c, (dq, dk, dv)> with respect to q, k, v and dout,
// where (dq, dk, dv) come from a backward with create_graph: what a gradient penalty or a
// Hessian-vector product through attention runs. Times the three passes and the peak tensor
// memory of all three beyond the inputs; sdpa_reference (autograd through primitive ops, as
// PyTorch's math path) beside it.
//
//   bench_sdpa_double_backward [threads] [B H S D] [causal]
// Prints one tab-separated line per function after the machine line:
//   name fwd_ms create_graph_bwd_ms double_bwd_ms peak_MiB
// bench/compare_sdpa_double_backward_torch.py runs it beside PyTorch's math path.
#include <tapegrad.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_args.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point a) {
  return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
}

struct Timing {
  double fwd = 0, bwd = 0, dbl = 0, peak_mib = 0;
};

template <class F>
Timing run_once(F attend, int64_t B, int64_t H, int64_t S, int64_t D, bool causal) {
  tg::Generator gen{1, 0};
  auto make = [&] { return tg::randn({B, H, S, D}, gen).requires_grad_(); };
  tg::Tensor q = make(), k = make(), v = make(), dout = make();
  std::vector<tg::Tensor> cot{tg::randn({B, H, S, D}, gen), tg::randn({B, H, S, D}, gen),
                              tg::randn({B, H, S, D}, gen)};
  tg::SdpaOptions o;
  o.causal = causal;
  Timing t;
  const int64_t base = tg::live_storage_bytes();
  tg::reset_peak_storage_bytes();
  auto a = Clock::now();
  tg::Tensor out = attend(q, k, v, o).out;
  t.fwd = ms_since(a);
  a = Clock::now();
  auto g = tg::grad({out}, {q, k, v}, {dout}, std::nullopt, true, /*create_graph=*/true);
  tg::Tensor l2 = tg::add(tg::add(tg::sum(tg::mul(g[0], cot[0])), tg::sum(tg::mul(g[1], cot[1]))),
                          tg::sum(tg::mul(g[2], cot[2])));
  t.bwd = ms_since(a);
  a = Clock::now();
  auto gg = tg::grad({l2}, {q, k, v, dout});
  t.dbl = ms_since(a);
  t.peak_mib = static_cast<double>(tg::peak_storage_bytes() - base) / 1048576.0;
  return t;
}

template <class F>
void report(const char* name, F attend, int64_t B, int64_t H, int64_t S, int64_t D, bool causal,
            int reps) {
  run_once(attend, B, H, S, D, causal);  // warm-up
  std::vector<Timing> ts;
  for (int i = 0; i < reps; ++i) ts.push_back(run_once(attend, B, H, S, D, causal));
  auto median = [&](double Timing::*m) {
    std::vector<double> x;
    for (const Timing& t : ts) x.push_back(t.*m);
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  std::printf("%s\t%.2f\t%.2f\t%.2f\t%.1f\n", name, median(&Timing::fwd), median(&Timing::bwd),
              median(&Timing::dbl), median(&Timing::peak_mib));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  return bench::guarded_main([&] {
    const bench::Args args =
        bench::parse_args("bench_sdpa_double_backward", argc, argv, 6, {"cpu"});
    tg::set_num_threads(args.number(0, "threads", 2));
    const int64_t B = args.number(1, "B", 1), H = args.number(2, "H", 8);
    const int64_t S = args.number(3, "S", 1024), D = args.number(4, "D", 64);
    const bool causal = args.number(5, "causal", 0) != 0;
    bench::print_machine();
    std::printf("shape\tB%lld_H%lld_S%lld_D%lld%s\n", static_cast<long long>(B),
                static_cast<long long>(H), static_cast<long long>(S), static_cast<long long>(D),
                causal ? "_causal" : "");
    report(
        "sdpa", [](auto&... a) { return tg::sdpa(a...); }, B, H, S, D, causal, 3);
    report(
        "sdpa_reference", [](auto&... a) { return tg::sdpa_reference(a...); }, B, H, S, D, causal,
        3);
    return 0;
  });
}
