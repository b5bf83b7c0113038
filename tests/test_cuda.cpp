// CUDA against CPU, in the manner of ggml's test-backend-ops: one table of op cases (float32,
// shapes with broadcast and non-contiguous views), each run on both devices from the same
// inputs, outputs and input gradients compared with a per-op tolerance; NaN and Inf are
// located and reported. Then what a table cannot say: bit-identical random streams, the
// caching allocator, device errors, and a transformer's training steps on both devices.
// Without a device the executable exits 77, which ctest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <sstream>

#include "test_util.h"

using namespace tg;

namespace {

using Inputs = std::vector<Tensor>;

struct OpCase {
  std::string name;
  std::function<Inputs()> make;  // float32 CPU inputs; those requiring grad get gradients
  std::function<Tensor(const Inputs&)> f;
  double tol = 1e-5;       // relative, with the same absolute floor
  double grad_tol = 1e-5;  // for the gradients
};

Tensor r(const Shape& s, uint64_t seed, double lo = -2, double hi = 2, bool grad = true) {
  Tensor t = tgtest::rnd(s, seed, lo, hi).to(kFloat32);
  return grad ? t.requires_grad_() : t;
}

std::string index_str(int64_t flat, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_str(idx);
}

// Compares a CUDA result with the CPU one; fails with the worst element, its index, and
// where NaN or Inf appear on one device and not the other.
void compare(const std::string& what, const Tensor& cpu, const Tensor& gpu, double tol) {
  INFO(what);
  REQUIRE(gpu.device().is_cuda());
  REQUIRE(cpu.sizes() == gpu.sizes());
  REQUIRE(cpu.dtype() == gpu.dtype());
  std::vector<double> a = cpu.to_vector<double>(), b = gpu.to_vector<double>();
  int64_t worst = -1, nonfinite_mismatch = -1;
  double worst_err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool fa = std::isfinite(a[i]), fb = std::isfinite(b[i]);
    if (!fa || !fb) {
      const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i];
      if (!same && nonfinite_mismatch < 0) nonfinite_mismatch = static_cast<int64_t>(i);
      continue;
    }
    const double err = std::abs(a[i] - b[i]) / (tol * (1 + std::abs(a[i])));
    if (err > worst_err) {
      worst_err = err;
      worst = static_cast<int64_t>(i);
    }
  }
  if (nonfinite_mismatch >= 0) {
    const auto i = static_cast<size_t>(nonfinite_mismatch);
    FAIL_CHECK("non-finite mismatch at " << index_str(nonfinite_mismatch, cpu.sizes()) << ": cpu "
                                         << a[i] << ", cuda " << b[i]);
  }
  if (worst_err > 1) {
    const auto i = static_cast<size_t>(worst);
    FAIL_CHECK("at " << index_str(worst, cpu.sizes()) << ": cpu " << a[i] << ", cuda " << b[i]
                     << " (" << worst_err << " x the tolerance " << tol << ")");
  }
}

void run_case(const OpCase& c) {
  INFO("op case: " << c.name);
  Inputs cpu_in = c.make(), gpu_in;
  for (const Tensor& t : cpu_in) {
    Tensor g = t.detach().to(kCUDA);
    if (t.requires_grad()) g.requires_grad_();
    gpu_in.push_back(g);
  }
  Tensor out_c = c.f(cpu_in), out_g = c.f(gpu_in);
  compare(c.name + " output", out_c, out_g, c.tol);
  if (!out_c.requires_grad()) return;
  Tensor cot = tgtest::rnd(out_c.sizes(), 99).to(out_c.dtype());
  out_c.backward(cot);
  out_g.backward(cot.to(kCUDA));
  for (size_t i = 0; i < cpu_in.size(); ++i) {
    if (!cpu_in[i].requires_grad()) continue;
    compare(c.name + " grad of input " + std::to_string(i), cpu_in[i].grad(), gpu_in[i].grad(),
            c.grad_tol);
  }
}

std::vector<OpCase> elementwise_cases() {
  std::vector<OpCase> cases;
  using U = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, U>> unary = {
      {"neg", [](const Tensor& x) { return neg(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"pow3", [](const Tensor& x) { return pow(x, 3.0); }},
  };
  for (const auto& [name, fn] : unary) {
    // On a transposed (non-contiguous) view of the input.
    cases.push_back({name + " (transposed view)",
                     [] {
                       return Inputs{r({5, 7}, 1)};
                     },
                     [fn = fn](const Inputs& in) { return fn(in[0].transpose(0, 1)); }});
  }
  const std::vector<std::pair<std::string, U>> positive = {
      {"log", [](const Tensor& x) { return log(x); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }},
      {"pow0.5", [](const Tensor& x) { return pow(x, 0.5); }},
  };
  for (const auto& [name, fn] : positive)
    cases.push_back({name + " (sliced view)",
                     [] {
                       return Inputs{r({6, 9}, 2, 0.1, 3)};
                     },
                     [fn = fn](const Inputs& in) { return fn(in[0].slice(1, 1, 9, 2)); }});
  using B = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<std::string, B>> binary = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, add(abs(b), 0.5)); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
  };
  for (const auto& [name, fn] : binary) {
    cases.push_back({name + " (broadcast 3x1x5 with 4x5)",
                     [] {
                       return Inputs{r({3, 1, 5}, 3), r({4, 5}, 4)};
                     },
                     [fn = fn](const Inputs& in) { return fn(in[0], in[1]); }});
    cases.push_back({name + " (permuted views)",
                     [] {
                       return Inputs{r({4, 3, 2}, 5), r({2, 4, 3}, 6)};
                     },
                     [fn = fn](const Inputs& in) {
                       return fn(in[0].permute({2, 0, 1}), in[1].permute({0, 1, 2}));
                     }});
  }
  cases.push_back({"comparisons and where",
                   [] {
                     return Inputs{r({6, 5}, 7), r({5}, 8)};
                   },
                   [](const Inputs& in) {
                     Tensor c = logical_or(lt(in[0], in[1]), eq(in[0], 0.5));
                     return where(logical_and(c, logical_not(ge(in[0], ones_like(in[1])))), in[0],
                                  mul(in[1], 2.0));
                   }});
  cases.push_back({"isfinite and masked_fill",
                   [] {
                     return Inputs{r({4, 8}, 9)};
                   },
                   [](const Inputs& in) {
                     Tensor x = log(in[0]);  // NaN for negative inputs
                     return masked_fill(x, logical_not(isfinite(x)), -3.0);
                   }});
  cases.push_back({"NaN propagates through maximum",
                   [] {
                     return Inputs{r({3, 4}, 10, -2, 2, false), r({3, 4}, 11, -2, 2, false)};
                   },
                   [](const Inputs& in) { return maximum(sqrt(in[0]), in[1]); }});
  cases.push_back({"copy between dtypes (to float64 and int64 and back)",
                   [] {
                     return Inputs{r({3, 7}, 12, -5, 5)};
                   },
                   [](const Inputs& in) {
                     Tensor i = mul(in[0], 3.0).to(kInt64);
                     return add(in[0].to(kFloat64).to(kFloat32), i.to(kFloat32));
                   }});
  cases.push_back({"cat, stack and split",
                   [] {
                     return Inputs{r({2, 3}, 13), r({2, 5}, 14)};
                   },
                   [](const Inputs& in) {
                     Tensor c = cat({in[0], in[1]}, 1);
                     std::vector<Tensor> parts = split(c, 4, 1);
                     return stack({parts[0], mul(parts[1], 2.0)}, 0);
                   }});
  cases.push_back(
      {"arange, full and contiguous of an expanded view",
       [] {
         return Inputs{r({1, 6}, 15)};
       },
       [](const Inputs& in) {
         Tensor a = arange(0.0, 3.0, 0.5, TensorOptions(kFloat32).device(in[0].device()));
         return add(in[0].expand({4, 6}).contiguous(),
                    add(a, full({4, 6}, 0.25, TensorOptions(kFloat32).device(in[0].device()))));
       }});
  return cases;
}

std::vector<OpCase> reduction_cases() {
  std::vector<OpCase> cases;
  cases.push_back({"sum over the last dim",
                   [] {
                     return Inputs{r({7, 300}, 20)};
                   },
                   [](const Inputs& in) { return sum(in[0], {1}); }, 1e-5});
  cases.push_back({"sum over the first dim (many adjacent outputs)",
                   [] {
                     return Inputs{r({500, 2100}, 21)};
                   },
                   [](const Inputs& in) { return sum(in[0], {0}); }, 1e-4});
  cases.push_back({"sum of everything (one long reduction)",
                   [] {
                     return Inputs{r({300, 400}, 22)};
                   },
                   [](const Inputs& in) { return sum(in[0]); }, 1e-4});
  cases.push_back({"mean over dims 0 and 2 of a permuted view",
                   [] {
                     return Inputs{r({6, 5, 40}, 23)};
                   },
                   [](const Inputs& in) {
                     return mean(in[0].permute({2, 0, 1}), {0, 2}, true);
                   }});
  cases.push_back({"max and min along a dim",
                   [] {
                     return Inputs{r({9, 33}, 24)};
                   },
                   [](const Inputs& in) { return add(max(in[0], {1}), sum(min(in[0], {0}))); }});
  cases.push_back({"argmax (first of ties) as float",
                   [] {
                     return Inputs{r({5, 40}, 25, -1, 1, false)};
                   },
                   [](const Inputs& in) {
                     Tensor x = mul(add(in[0], 1.0), 2.0).to(kInt64).to(kFloat32);  // many ties
                     return argmax(x, 1).to(kFloat32);
                   }});
  cases.push_back({"logsumexp and var",
                   [] {
                     return Inputs{r({4, 50}, 26)};
                   },
                   [](const Inputs& in) { return add(logsumexp(in[0], {1}), var(in[0], {1})); }});
  cases.push_back({"sum of bools counts",
                   [] {
                     return Inputs{r({64, 64}, 27, -1, 1, false)};
                   },
                   [](const Inputs& in) { return sum(gt(in[0], 0.0)).to(kFloat32); }});
  return cases;
}

std::vector<OpCase> matmul_cases() {
  std::vector<OpCase> cases;
  cases.push_back({"matmul 2-D",
                   [] {
                     return Inputs{r({33, 17}, 30), r({17, 29}, 31)};
                   },
                   [](const Inputs& in) { return matmul(in[0], in[1]); }, 1e-5, 1e-4});
  cases.push_back(
      {"matmul with a transposed operand",
       [] {
         return Inputs{r({17, 33}, 32), r({29, 17}, 33)};
       },
       [](const Inputs& in) { return matmul(in[0].transpose(0, 1), in[1].transpose(0, 1)); }, 1e-5,
       1e-4});
  cases.push_back({"matmul with broadcast batch dims",
                   [] {
                     return Inputs{r({2, 1, 5, 8}, 34), r({3, 8, 6}, 35)};
                   },
                   [](const Inputs& in) { return matmul(in[0], in[1]); }, 1e-5, 1e-4});
  cases.push_back({"matmul (..., m, k) @ (k, n) folded",
                   [] {
                     return Inputs{r({4, 6, 16}, 36), r({16, 12}, 37)};
                   },
                   [](const Inputs& in) { return matmul(in[0], in[1]); }, 1e-5, 1e-4});
  cases.push_back({"matmul vector cases",
                   [] {
                     return Inputs{r({7}, 38), r({3, 7, 4}, 39)};
                   },
                   [](const Inputs& in) { return matmul(in[0], in[1]); }, 1e-5, 1e-4});
  cases.push_back({"matmul with permuted batch (attention layout)",
                   [] {
                     return Inputs{r({2, 9, 3, 8}, 40), r({2, 9, 3, 8}, 41)};
                   },
                   [](const Inputs& in) {
                     Tensor q = in[0].transpose(1, 2), k = in[1].transpose(1, 2);
                     return matmul(q, k.transpose(-1, -2));
                   },
                   1e-5, 1e-4});
  return cases;
}

std::vector<OpCase> nn_cases() {
  std::vector<OpCase> cases;
  cases.push_back({"softmax and log_softmax",
                   [] {
                     return Inputs{r({5, 3, 70}, 50, -6, 6)};
                   },
                   [](const Inputs& in) {
                     return add(softmax(in[0], -1),
                                log_softmax(in[0].transpose(0, 2), 0).transpose(0, 2));
                   }});
  cases.push_back(
      {"cross_entropy with ignored targets",
       [] {
         return Inputs{
             r({6, 5, 11}, 51, -3, 3),
             from_vector(std::vector<int64_t>{0, 3, 10, -100, 4,  4, 2, 7, 9, -100, 1, 5, 6, 8, 0,
                                              3, 3, 3,  2,    10, 9, 8, 7, 6, 5,    4, 1, 0, 2, 1},
                         {6, 5})};
       },
       [](const Inputs& in) { return cross_entropy(in[0], in[1]); }});
  cases.push_back(
      {"embedding with repeated ids (deterministic scatter-add)",
       [] {
         return Inputs{
             r({13, 24}, 52),
             from_vector(std::vector<int64_t>{3, 0, 3, 12, 5, 3, 0, 7, 12, 12, 1, 3}, {3, 4})};
       },
       [](const Inputs& in) { return embedding(in[0], in[1]); }});
  cases.push_back({"rms_norm with weight (broadcast rows)",
                   [] {
                     return Inputs{r({3, 7, 96}, 53), r({96}, 54, 0.5, 1.5)};
                   },
                   [](const Inputs& in) { return rms_norm(in[0], in[1], 1e-5); }});
  cases.push_back({"rms_norm of a strided input, no weight",
                   [] {
                     return Inputs{r({40, 33}, 55)};
                   },
                   [](const Inputs& in) { return rms_norm(in[0].transpose(0, 1), Tensor()); }});
  cases.push_back({"rope (B, H, S, D) with an offset",
                   [] {
                     return Inputs{r({2, 3, 10, 16}, 56)};
                   },
                   [](const Inputs& in) {
                     RopeOptions o;
                     o.offset = 5;
                     return rope(in[0], o);
                   }});
  cases.push_back({"rope (B, S, H, D) of a strided input",
                   [] {
                     return Inputs{r({2, 3, 10, 8}, 57)};
                   },
                   [](const Inputs& in) {
                     RopeOptions o;
                     o.seq_dim = -3;
                     return rope(in[0].transpose(1, 2), o);
                   }});
  cases.push_back({"swiglu",
                   [] {
                     return Inputs{r({5, 2, 48}, 58)};
                   },
                   [](const Inputs& in) { return swiglu(in[0]); }});
  cases.push_back({"dropout (the same Philox stream)",
                   [] {
                     return Inputs{r({37, 29}, 59)};
                   },
                   [](const Inputs& in) { return dropout(in[0], 0.3, 7, 12); }, 1e-6, 1e-6});
  return cases;
}

// SDPA with options combined: the simple CUDA kernels against the CPU's flash-style ones.
std::vector<OpCase> sdpa_cases() {
  struct Shape4 {
    int64_t B, Hq, Hk, Sq, Skv, Dqk, Dv;
  };
  std::vector<OpCase> cases;
  auto add_case = [&](const std::string& name, Shape4 s,
                      std::function<void(SdpaOptions&, const Inputs&)> opt, bool float_mask = false,
                      bool transpose_inputs = false) {
    cases.push_back({"sdpa " + name,
                     [s, float_mask] {
                       Inputs in{r({s.B, s.Hq, s.Sq, s.Dqk}, 60), r({s.B, s.Hk, s.Skv, s.Dqk}, 61),
                                 r({s.B, s.Hk, s.Skv, s.Dv}, 62)};
                       if (float_mask) in.push_back(r({1, s.Hq, s.Sq, s.Skv}, 63));
                       return in;
                     },
                     [opt, transpose_inputs](const Inputs& in) {
                       SdpaOptions o;
                       opt(o, in);
                       if (in.size() > 3) o.mask = in[3];
                       Tensor q = in[0], k = in[1], v = in[2];
                       if (transpose_inputs) {  // strided (B, S, H, D) storage seen as (B, H, S, D)
                         q = q.transpose(1, 2).contiguous().transpose(1, 2);
                         k = k.transpose(1, 2).contiguous().transpose(1, 2);
                       }
                       return sdpa(q, k, v, o).out;
                     },
                     1e-5, 1e-4});
  };
  const Shape4 base{2, 4, 2, 37, 45, 16, 24};
  add_case("plain, GQA, Dqk != Dv, Sq != Skv", base, [](SdpaOptions&, const Inputs&) {});
  add_case("causal top-left", base, [](SdpaOptions& o, const Inputs&) { o.causal = true; });
  add_case("causal bottom-right, window 9", base, [](SdpaOptions& o, const Inputs&) {
    o.causal = true;
    o.causal_align = CausalAlign::BottomRight;
    o.window = 9;
  });
  add_case(
      "float mask with its gradient", base, [](SdpaOptions&, const Inputs&) {}, true);
  add_case("boolean mask and padding", base, [](SdpaOptions& o, const Inputs& in) {
    Generator g{5, 0};
    Tensor m = gt(rand({2, 1, 37, 45}, g).to(in[0].device()), 0.3);
    o.mask = m;
    o.seq_len_q = from_vector(std::vector<int64_t>{30, 37}, {2},
                              TensorOptions(kInt64).device(in[0].device()));
    o.seq_len_kv = from_vector(std::vector<int64_t>{45, 20}, {2},
                               TensorOptions(kInt64).device(in[0].device()));
  });
  add_case("ALiBi, softcap, scale", base, [](SdpaOptions& o, const Inputs&) {
    o.alibi = true;
    o.softcap = 5;
    o.scale = 0.4;
  });
  add_case("dropout (bit-identical keep mask)", base, [](SdpaOptions& o, const Inputs&) {
    o.dropout_p = 0.25;
    o.seed = 11;
    o.offset = 8;
  });
  add_case(
      "strided inputs, MQA, head dim 100", {1, 3, 1, 20, 20, 100, 72},
      [](SdpaOptions& o, const Inputs&) { o.causal = true; }, false, true);
  return cases;
}

void run_all(const std::vector<OpCase>& cases) {
  for (const OpCase& c : cases) run_case(c);
}

}  // namespace

TEST_CASE("parity: elementwise, broadcast, views and dtype copies") {
  run_all(elementwise_cases());
}
TEST_CASE("parity: reductions") { run_all(reduction_cases()); }
TEST_CASE("parity: matmul through cuBLAS") { run_all(matmul_cases()); }
TEST_CASE("parity: nn ops (softmax, cross-entropy, embedding, rms_norm, rope, swiglu, dropout)") {
  run_all(nn_cases());
}
TEST_CASE("parity: sdpa with options combined") { run_all(sdpa_cases()); }

namespace {

// One random SDPA configuration: shapes and every option drawn from `rng`.
struct SdpaConfig {
  int64_t B, Hq, Hk, Sq, Skv, Dqk, Dv;
  SdpaOptions opts;
  Shape mask_shape;  // empty: no mask
  bool bool_mask = false, strided = false;
  std::string describe() const {
    std::ostringstream os;
    os << "B" << B << " Hq" << Hq << " Hk" << Hk << " Sq" << Sq << " Skv" << Skv << " Dqk" << Dqk
       << " Dv" << Dv << (opts.causal ? " causal" : "")
       << (opts.causal_align == CausalAlign::BottomRight ? "(bottom-right)" : "") << " window"
       << opts.window << " mask" << shape_str(mask_shape) << (bool_mask ? "(bool)" : "")
       << (opts.seq_len_q ? " padded" : "") << (opts.alibi ? " alibi" : "") << " softcap"
       << opts.softcap << " dropout" << opts.dropout_p << (strided ? " strided" : "");
    return os.str();
  }
};

SdpaConfig random_config(std::mt19937& rng) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  const int64_t dims[] = {8, 16, 24, 32, 40, 64, 72, 96, 128, 160};
  SdpaConfig c;
  c.B = pick(1, 2);
  c.Hk = pick(1, 2);
  c.Hq = c.Hk * pick(1, 3);
  c.Sq = pick(1, 150);
  c.Skv = coin(0.5) ? c.Sq : pick(1, 150);
  c.Dqk = dims[pick(0, 9)];
  c.Dv = coin(0.6) ? c.Dqk : dims[pick(0, 9)];
  SdpaOptions& o = c.opts;
  o.causal = coin(0.5);
  if (coin(0.5)) o.causal_align = CausalAlign::BottomRight;
  if (coin(0.25)) o.window = pick(1, 40);
  if (coin(0.3)) o.scale = 0.05 + 0.3 * std::uniform_real_distribution<double>()(rng);
  o.alibi = coin(0.2);
  if (coin(0.2)) o.softcap = 2 + 10 * std::uniform_real_distribution<double>()(rng);
  if (coin(0.3)) {
    o.dropout_p = 0.1 + 0.4 * std::uniform_real_distribution<double>()(rng);
    o.seed = static_cast<uint64_t>(pick(0, 1000));
    o.offset = 4 * static_cast<uint64_t>(pick(0, 100));
  }
  if (coin(0.4)) {  // a mask broadcast from a random subset of (B, Hq, Sq, Skv)
    c.mask_shape = {coin(0.5) ? c.B : 1, coin(0.5) ? c.Hq : 1, coin(0.8) ? c.Sq : 1,
                    coin(0.9) ? c.Skv : 1};
    c.bool_mask = coin(0.5);
  }
  c.strided = coin(0.3);
  return c;
}

}  // namespace

TEST_CASE("sdpa: CUDA against CPU over 300 random option combinations, outputs poisoned") {
  std::mt19937 rng(2026);
  int tiled = 0;
  for (int n = 0; n < 300; ++n) {
    SdpaConfig c = random_config(rng);
    INFO("config " << n << ": " << c.describe());
    const uint64_t seed = 1000 + static_cast<uint64_t>(n) * 10;
    Tensor q = tgtest::rnd({c.B, c.Hq, c.Sq, c.Dqk}, seed).to(kFloat32);
    Tensor k = tgtest::rnd({c.B, c.Hk, c.Skv, c.Dqk}, seed + 1).to(kFloat32);
    Tensor v = tgtest::rnd({c.B, c.Hk, c.Skv, c.Dv}, seed + 2).to(kFloat32);
    Tensor dout = tgtest::rnd({c.B, c.Hq, c.Sq, c.Dv}, seed + 3).to(kFloat32);
    SdpaOptions cpu = c.opts, gpu = c.opts;
    if (!c.mask_shape.empty()) {
      Tensor m = c.bool_mask ? gt(tgtest::rnd(c.mask_shape, seed + 4), -0.6)  // some rows empty
                             : tgtest::rnd(c.mask_shape, seed + 4, -3, 1).to(kFloat32);
      cpu.mask = m;
      gpu.mask = m.to(kCUDA);
    }
    if (std::bernoulli_distribution(0.3)(rng)) {
      std::vector<int64_t> lq, lkv;
      for (int64_t b = 0; b < c.B; ++b) {
        lq.push_back(std::uniform_int_distribution<int64_t>(0, c.Sq)(rng));
        lkv.push_back(std::uniform_int_distribution<int64_t>(0, c.Skv)(rng));
      }
      cpu.seq_len_q = from_vector(lq, {c.B});
      cpu.seq_len_kv = from_vector(lkv, {c.B});
      gpu.seq_len_q = cpu.seq_len_q->to(kCUDA);
      gpu.seq_len_kv = cpu.seq_len_kv->to(kCUDA);
    }
    auto on_gpu = [&](const Tensor& t) {
      Tensor g = t.to(kCUDA);  // strided: (B, S, H, D) storage seen as (B, H, S, D)
      return c.strided ? g.transpose(1, 2).contiguous().transpose(1, 2) : g;
    };
    Tensor gq = on_gpu(q), gk = on_gpu(k), gv = on_gpu(v), gdout = dout.to(kCUDA);
    tiled += std::max(c.Dqk, c.Dv) <= 128;
    SdpaResult rc = sdpa_forward(q, k, v, cpu);
    cuda_poison_allocations(true);
    SdpaResult rg = sdpa_forward(gq, gk, gv, gpu);
    SdpaGrads gg = sdpa_backward(gq, gk, gv, rg.out, gdout, rg.stats, gpu);
    cuda_poison_allocations(false);
    SdpaGrads gc = sdpa_backward(q, k, v, rc.out, dout, rc.stats, cpu);
    compare("out", rc.out, rg.out, 2e-5);
    compare("stats", rc.stats, rg.stats, 2e-5);
    compare("dq", gc.dq, gg.dq, 1e-4);
    compare("dk", gc.dk, gg.dk, 1e-4);
    compare("dv", gc.dv, gg.dv, 1e-4);
    if (gc.dmask.defined()) compare("dmask", gc.dmask, gg.dmask, 1e-4);
  }
  CHECK(tiled > 200);  // most configurations exercise the tiled kernels
}

TEST_CASE("sdpa on CUDA: the backward is deterministic (bitwise equal run to run)") {
  Tensor q = tgtest::rnd({2, 4, 150, 64}, 1).to(kFloat32).to(kCUDA);
  Tensor k = tgtest::rnd({2, 2, 130, 64}, 2).to(kFloat32).to(kCUDA);
  Tensor v = tgtest::rnd({2, 2, 130, 64}, 3).to(kFloat32).to(kCUDA);
  Tensor dout = tgtest::rnd({2, 4, 150, 64}, 4).to(kFloat32).to(kCUDA);
  SdpaOptions o;
  o.dropout_p = 0.2;
  o.seed = 5;
  SdpaResult r = sdpa_forward(q, k, v, o);
  SdpaGrads a = sdpa_backward(q, k, v, r.out, dout, r.stats, o);
  SdpaGrads b = sdpa_backward(q, k, v, r.out, dout, r.stats, o);
  CHECK(a.dq.to_vector<float>() == b.dq.to_vector<float>());
  CHECK(a.dk.to_vector<float>() == b.dk.to_vector<float>());
  CHECK(a.dv.to_vector<float>() == b.dv.to_vector<float>());
}

TEST_CASE("random streams are bit-identical across devices") {
  Generator a{42, 4}, b{42, 4};
  std::vector<float> cpu = rand({1000}, a).to_vector<float>();
  std::vector<float> gpu = rand({1000}, b, TensorOptions().device(kCUDA)).to_vector<float>();
  CHECK(cpu == gpu);
  SdpaOptions o;
  o.dropout_p = 0.4;
  o.seed = 3;
  o.offset = 16;
  CHECK(sdpa_dropout_mask(2, 3, 17, 19, o).to_vector<bool>() ==
        sdpa_dropout_mask(2, 3, 17, 19, o, kCUDA).to_vector<bool>());
  Tensor x = tgtest::rnd({64, 33}, 5).to(kFloat32);
  CHECK(dropout(x, 0.5, 9, 0).to_vector<float>() ==
        dropout(x.to(kCUDA), 0.5, 9, 0).to_vector<float>());
  Generator c{7, 0}, d{7, 0};
  tgtest::check_close(randn({257}, c, kFloat64).to_vector<double>(),
                      randn({257}, d, TensorOptions(kFloat64).device(kCUDA)).to_vector<double>(),
                      1e-12);
}

TEST_CASE("the embedding gradient is bitwise the CPU's (same additions, same order)") {
  Tensor w = tgtest::rnd({50, 40}, 3).to(kFloat32);
  std::vector<int64_t> ids(700);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7919) % 50);
  Tensor id = from_vector(ids, {700});
  Tensor g = tgtest::rnd({700, 40}, 4).to(kFloat32);
  std::vector<float> cpu = embedding_backward(g, id, 50).to_vector<float>();
  std::vector<float> gpu = embedding_backward(g.to(kCUDA), id.to(kCUDA), 50).to_vector<float>();
  CHECK(cpu == gpu);
}

TEST_CASE("float64 on CUDA: matmul and sdpa agree with the CPU to 1e-12") {
  Tensor a = tgtest::rnd({3, 20, 30}, 1), b = tgtest::rnd({30, 10}, 2);
  tgtest::check_close(matmul(a.to(kCUDA), b.to(kCUDA)).to_vector<double>(),
                      matmul(a, b).to_vector<double>(), 1e-12);
  Tensor q = tgtest::rnd({1, 2, 9, 8}, 3), k = tgtest::rnd({1, 2, 11, 8}, 4),
         v = tgtest::rnd({1, 2, 11, 8}, 5);
  SdpaOptions o;
  o.causal = true;
  o.causal_align = CausalAlign::BottomRight;
  tgtest::check_close(sdpa(q.to(kCUDA), k.to(kCUDA), v.to(kCUDA), o).out.to_vector<double>(),
                      sdpa(q, k, v, o).out.to_vector<double>(), 1e-12);
}

TEST_CASE("sdpa on CUDA: fully masked rows give zeros and -inf statistics") {
  Tensor q = tgtest::rnd({1, 1, 4, 8}, 1).to(kFloat32).to(kCUDA);
  Tensor k = tgtest::rnd({1, 1, 6, 8}, 2).to(kFloat32).to(kCUDA);
  Tensor v = tgtest::rnd({1, 1, 6, 8}, 3).to(kFloat32).to(kCUDA);
  SdpaOptions o;
  o.mask =
      from_vector(std::vector<bool>(24, false), {1, 1, 4, 6}, TensorOptions(kBool).device(kCUDA));
  SdpaResult res = sdpa(q, k, v, o);
  for (float x : res.out.to_vector<float>()) CHECK(x == 0.0f);
  for (float s : res.stats.to_vector<float>()) CHECK(std::isinf(s));
}

TEST_CASE("the caching allocator: no cudaMalloc once a step's sizes have been seen") {
  auto step = [] {
    Tensor x = randn({256, 128}, TensorOptions().device(kCUDA)).requires_grad_();
    Tensor w = randn({128, 64}, TensorOptions().device(kCUDA)).requires_grad_();
    sum(tanh(matmul(x, w))).backward();
    return sum(w.grad()).item<float>();
  };
  step();
  const int64_t mallocs = cuda_memory_stats().mallocs;
  for (int i = 0; i < 3; ++i) step();
  CHECK(cuda_memory_stats().mallocs == mallocs);
  CHECK(cuda_memory_stats().cached > 0);
  cuda_empty_cache();
  CHECK(cuda_memory_stats().cached == 0);
}

TEST_CASE("device errors are tg::Error with the op and the devices named") {
  Tensor a = ones({3}), b = ones({3}, TensorOptions().device(kCUDA));
  tgtest::check_throws_with_prefix([&] { add(a, b); }, "[add]", "cuda:0");
  tgtest::check_throws_with_prefix(
      [] { zeros({2}, TensorOptions().device(Device(DeviceType::CUDA, 99))); }, "[cuda]",
      "out of range");
  tgtest::check_throws_with_prefix([] { empty({int64_t(1) << 45}, TensorOptions().device(kCUDA)); },
                                   "[cuda]", "out of memory");
  Tensor q = zeros({1, 1, 2, 300}, TensorOptions().device(kCUDA));
  tgtest::check_throws_with_prefix([&] { sdpa(q, q, q); }, "[sdpa]", "head dims up to 256");
}

TEST_CASE("a transformer trains on CUDA: loss and gradients track the CPU's") {
  nn::TransformerConfig cfg;
  cfg.vocab = 256;  // byte tokens
  cfg.d_model = 32;
  cfg.layers = 2;
  cfg.heads = 4;
  cfg.kv_heads = 2;
  cfg.attn_dropout = 0.1;
  nn::Transformer cpu_model(cfg, 3), gpu_model(cfg, 3);
  gpu_model.to(kCUDA);
  nn::AdamW cpu_opt(cpu_model.named_parameters(), {1e-2}),
      gpu_opt(gpu_model.named_parameters(), {1e-2});
  auto task = nn::make_task("reverse", 6);
  for (int64_t step = 0; step < 5; ++step) {
    nn::Batch batch = nn::task_batch(*task, 16, 1, step);
    nn::Batch gbatch{batch.inputs.to(kCUDA), batch.targets.to(kCUDA)};
    Generator d1 = nn::step_dropout_generator(1, step), d2 = nn::step_dropout_generator(1, step);
    const double lc = nn::train_step(cpu_model, cpu_opt, batch, d1);
    const double lg = nn::train_step(gpu_model, gpu_opt, gbatch, d2);
    INFO("step " << step << ": cpu loss " << lc << ", cuda loss " << lg);
    CHECK(std::abs(lc - lg) < 1e-4 * (1 + std::abs(lc)));
  }
  auto pc = cpu_model.named_parameters(), pg = gpu_model.named_parameters();
  for (size_t i = 0; i < pc.size(); ++i)
    compare("parameter " + pc[i].first + " after 5 steps", pc[i].second, pg[i].second, 1e-3);
}

int main(int argc, char** argv) {
  if (!cuda_is_available()) {
    std::printf("no CUDA device: the CUDA parity suite is skipped\n");
    return 77;  // ctest SKIP_RETURN_CODE
  }
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
