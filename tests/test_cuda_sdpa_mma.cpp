// SDPA on the tensor cores (bfloat16 and float16, and float32 as 3xTF32 under
// set_float32_matmul_precision("high"); backends/cuda/cuda_sdpa_mma.cu) against the CPU: random
// option combinations with NaN-poisoned outputs, at aligned, strided and misaligned layouts
// (16-byte copies and element loads), the deterministic backward, fully masked rows, and that
// switching the kernels on changes which code runs.
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
#include <random>
#include <string>

#include "cuda_parity.h"
#include "sdpa_random.h"

using namespace tg;
using namespace cudatest;

namespace {

// A setting (kGet / kSet) changed for a scope and restored after it.
template <class T, T (*kGet)(), void (*kSet)(T)>
struct Scoped {
  T was = kGet();
  explicit Scoped(T value) { kSet(value); }
  ~Scoped() { kSet(was); }
  Scoped(const Scoped&) = delete;
  Scoped& operator=(const Scoped&) = delete;
};
using TensorCores = Scoped<bool, cuda_sdpa_tensor_cores, set_cuda_sdpa_tensor_cores>;
using WarpRows = Scoped<int, cuda_sdpa_warp_rows, set_cuda_sdpa_warp_rows>;

// set_float32_matmul_precision for a scope.
struct Float32Precision {
  std::string was = float32_matmul_precision();
  explicit Float32Precision(const std::string& p) { set_float32_matmul_precision(p); }
  ~Float32Precision() { set_float32_matmul_precision(was); }
  Float32Precision(const Float32Precision&) = delete;
  Float32Precision& operator=(const Float32Precision&) = delete;
};

// The unit of the kernels' error relative to the terms' magnitudes: the 16-bit types' unit
// roundoff; for float32 on the tensor cores, 3xTF32's: a = hi + lo + e with |e| <= 2^-22 |a|,
// and each product drops lo lo and the two e terms, 3 x 2^-22 of |a b|, so 2^-20. The CPU's
// own float32 sums (here the reference, unlike for 16 bits) are of the same order: sqrt(n)
// 2^-24 for n = 256 terms is 2^-20. Not yet confirmed on a GPU.
double unit(DType dt) {
  if (dt == kFloat32) return 0x1p-20;
  return dt == kBFloat16 ? 0x1p-8 : 0x1p-11;
}

void check_close(const std::string& what, const Tensor& cpu, const Tensor& gpu, double tol) {
  const double err = tgtest::rel_error(gpu.to(kCPU), cpu);
  INFO(what << ": error " << err << " of the largest element, allowed " << tol);
  CHECK(err <= tol);
}

// |gpu - cpu| <= tol * bound element by element (both zero where the bound is: rows that see
// no key); the worst element is reported.
void check_bounded(const std::string& what, const Tensor& cpu, const Tensor& gpu,
                   const Tensor& bound, double tol) {
  const std::vector<double> c = cpu.to(kFloat64).to_vector<double>();
  const std::vector<double> g = gpu.to(kCPU).to(kFloat64).to_vector<double>();
  const std::vector<double> m = bound.to_vector<double>();
  REQUIRE(c.size() == g.size());
  REQUIRE(c.size() == m.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    double ratio = 0;
    if (std::isnan(g[i]) || std::isnan(c[i]))
      ratio = INFINITY;
    else if (g[i] != c[i])
      ratio = std::abs(g[i] - c[i]) / m[i];  // infinite where the bound is 0
    if (ratio > worst) {
      worst = ratio;
      at = i;
    }
  }
  INFO(what << ": worst element " << at << ": cpu " << c[at] << ", gpu " << g[at]
            << ", terms' magnitude " << m[at] << ": error " << worst << " x the magnitude, allowed "
            << tol);
  CHECK(worst <= tol);
}

// (B, Hk, S, D) rows seen by each of the Hq query heads: (B, Hq, S, D).
Tensor per_query_head(const Tensor& x, int64_t Hq) {
  const Shape& s = x.sizes();
  return x.unsqueeze(2).expand({s[0], s[1], Hq / s[1], s[2], s[3]}).reshape({s[0], Hq, s[2], s[3]});
}
// (B, Hq, S, D) summed over each key/value head's group: (B, Hk, S, D).
Tensor per_kv_head(const Tensor& x, int64_t Hk) {
  const Shape& s = x.sizes();
  return sum(x.reshape({s[0], Hk, s[1] / Hk, s[2], s[3]}), {2});
}

struct Magnitudes {
  Tensor out, dq, dk, dv, dmask;
};

// For each result element, the sum of the magnitudes of the terms it is made of, from the
// 16-bit inputs (as float64) and the CPU options o: with P the probabilities, Pd those after
// dropout (P V = O), A = |dO| |V|^T (which bounds |dP| and, weighted by Pd, |rowsum(dO * O)|):
// out ~ Pd |V|; dS ~ E = Pd A + P rowsum(Pd A); dQ ~ scale E |K|; dK ~ scale E^T |Q|;
// dV ~ Pd^T |dO|; dMask ~ E summed as the mask broadcasts. P and Pd come from the CPU's sdpa
// itself, with V the identity (out = Pd).
Magnitudes term_magnitudes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                           SdpaOptions o) {
  const int64_t B = q.size(0), Hq = q.size(1), Hk = k.size(1), Skv = k.size(2);
  if (o.mask && o.mask->dtype() != kBool) o.mask = o.mask->to(kFloat64);
  std::vector<double> eye(static_cast<size_t>(Skv * Skv), 0.0);
  for (int64_t j = 0; j < Skv; ++j) eye[static_cast<size_t>(j * Skv + j)] = 1;
  const Tensor ident = from_vector(eye, {1, 1, Skv, Skv}).expand({B, Hk, Skv, Skv});
  const Tensor pd = sdpa_forward(q, k, ident, o).out;
  SdpaOptions no_dropout = o;
  no_dropout.dropout_p = 0;
  const Tensor p = sdpa_forward(q, k, ident, no_dropout).out;
  const Tensor av = abs(per_query_head(v, Hq)), ak = abs(per_query_head(k, Hq));
  const Tensor a = matmul(abs(dout), av.transpose(2, 3));
  const Tensor pa = pd * a;
  const Tensor e = pa + p * sum(pa, {3}, true);
  const double scale = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  Magnitudes m;
  m.out = matmul(pd, av);
  m.dq = matmul(e, ak) * scale;
  m.dk = per_kv_head(matmul(e.transpose(2, 3), abs(q)), Hk) * scale;
  m.dv = per_kv_head(matmul(pd.transpose(2, 3), abs(dout)), Hk);
  if (o.mask && o.mask->dtype() != kBool) m.dmask = sum_to(e, o.mask->sizes());
  return m;
}

enum class Layout { Contiguous, Strided, Misaligned };

// x (float64, CPU) in dtype dt on the device: contiguous; (B, S, H, D) storage seen as
// (B, H, S, D) (16-byte copies still apply); or one element past a 16-byte boundary with an
// odd row stride (element loads).
Tensor on_device(const Tensor& x, DType dt, Layout layout) {
  Tensor g = x.to(dt).to(kCUDA);  // not const: returned by move
  if (layout == Layout::Strided) return g.transpose(1, 2).contiguous().transpose(1, 2);
  if (layout == Layout::Misaligned) {
    Shape pad = g.sizes();
    pad[3] = 1;
    return cat({zeros(pad, g.options()), g}, 3).narrow(3, 1, g.size(3));
  }
  return g;
}

struct Config {
  int64_t B = 1, Hq = 1, Hk = 1, Sq = 1, Skv = 1, Dqk = 8, Dv = 8;
  SdpaOptions opts;
  Shape mask_shape;  // empty: no mask
  bool bool_mask = false;
  Layout layout = Layout::Contiguous;
};

// Shapes across the kernels' tile widths (32, 64, 128, 256 forward; the backward above 128
// widens to float32) and across several 64-row tiles; every option of DESIGN §4.
Config random_config(std::mt19937_64& rng) {
  tgtest::Draws draw{rng};
  const int64_t dims[] = {8, 12, 16, 32, 40, 64, 72, 96, 100, 128, 160, 200, 256};
  Config c;
  c.B = draw.pick(1, 2);
  c.Hk = draw.pick(1, 2);
  c.Hq = c.Hk * draw.pick(1, 3);
  c.Sq = draw.pick(1, 200);
  c.Skv = draw.coin(0.5) ? c.Sq : draw.pick(1, 200);
  c.Dqk = dims[draw.pick(0, 12)];
  c.Dv = draw.coin(0.6) ? c.Dqk : dims[draw.pick(0, 12)];
  c.opts = tgtest::random_sdpa_options(rng, {.causal = 0.5, .max_window = 40, .alibi = 0.2});
  if (draw.coin(0.4)) {
    c.mask_shape = {draw.coin(0.5) ? c.B : 1, draw.coin(0.5) ? c.Hq : 1, draw.coin(0.8) ? c.Sq : 1,
                    draw.coin(0.9) ? c.Skv : 1};
    c.bool_mask = draw.coin(0.5);
  }
  const int64_t layout = draw.pick(0, 4);
  c.layout = layout == 3 ? Layout::Strided : layout == 4 ? Layout::Misaligned : Layout::Contiguous;
  return c;
}

std::string describe(const Config& c) {
  std::ostringstream os;
  os << "B" << c.B << " Hq" << c.Hq << " Hk" << c.Hk << " Sq" << c.Sq << " Skv" << c.Skv << " Dqk"
     << c.Dqk << " Dv" << c.Dv << " layout " << static_cast<int>(c.layout)
     << tgtest::describe_options(c.opts,
                                 c.mask_shape.empty() ? 0
                                 : c.bool_mask        ? 2
                                                      : 1,
                                 c.mask_shape, c.layout != Layout::Contiguous);
  return os.str();
}

std::string lengths(const std::optional<Tensor>& len) {
  if (!len) return "all";
  std::ostringstream os;
  for (int64_t n : len->to_vector<int64_t>()) os << n << " ";
  return os.str();
}

// Forward and backward of configuration c in dtype dt on both devices, compared.
void compare_config(const Config& c, DType dt, uint64_t seed, std::mt19937_64& rng) {
  const Tensor q = tgtest::rnd({c.B, c.Hq, c.Sq, c.Dqk}, seed);
  const Tensor k = tgtest::rnd({c.B, c.Hk, c.Skv, c.Dqk}, seed + 1);
  const Tensor v = tgtest::rnd({c.B, c.Hk, c.Skv, c.Dv}, seed + 2);
  const Tensor dout = tgtest::rnd({c.B, c.Hq, c.Sq, c.Dv}, seed + 3);
  SdpaOptions cpu = c.opts, gpu = c.opts;
  if (!c.mask_shape.empty()) {
    const Tensor m = c.bool_mask ? gt(tgtest::rnd(c.mask_shape, seed + 4), -0.6)  // some rows empty
                                 : tgtest::rnd(c.mask_shape, seed + 4, -3, 1).to(dt);
    cpu.mask = m;
    gpu.mask = m.to(kCUDA);
  }
  if (tgtest::Draws{rng}.coin(0.3)) {
    std::vector<int64_t> lq, lkv;
    for (int64_t b = 0; b < c.B; ++b) {
      lq.push_back(tgtest::Draws{rng}.pick(0, c.Sq));
      lkv.push_back(tgtest::Draws{rng}.pick(0, c.Skv));
    }
    cpu.seq_len_q = from_vector(lq, {c.B});
    cpu.seq_len_kv = from_vector(lkv, {c.B});
    gpu.seq_len_q = cpu.seq_len_q->to(kCUDA);
    gpu.seq_len_kv = cpu.seq_len_kv->to(kCUDA);
  }
  INFO("lengths: " << lengths(cpu.seq_len_q) << " / " << lengths(cpu.seq_len_kv));
  const Tensor cq = q.to(dt), ck = k.to(dt), cv = v.to(dt), cdout = dout.to(dt);
  const SdpaResult rc = sdpa_forward(cq, ck, cv, cpu);
  const SdpaGrads gc = sdpa_backward(cq, ck, cv, rc.out, cdout, rc.stats, cpu);
  const Tensor gq = on_device(q, dt, c.layout), gk = on_device(k, dt, c.layout);
  const Tensor gv = on_device(v, dt, c.layout), gdout = on_device(dout, dt, c.layout);
  cuda_poison_allocations(true);
  const SdpaResult rg = sdpa_forward(gq, gk, gv, gpu);
  const SdpaGrads gg = sdpa_backward(gq, gk, gv, rg.out, gdout, rg.stats, gpu);
  cuda_poison_allocations(false);
  const Magnitudes m =
      term_magnitudes(cq.to(kFloat64), ck.to(kFloat64), cv.to(kFloat64), cdout.to(kFloat64), cpu);
  const double u = unit(dt);
  check_bounded("out", rc.out, rg.out, m.out, 4 * u);
  check_close("stats", rc.stats, rg.stats, 1e-5);
  check_bounded("dq", gc.dq, gg.dq, m.dq, 8 * u);
  check_bounded("dk", gc.dk, gg.dk, m.dk, 8 * u);
  check_bounded("dv", gc.dv, gg.dv, m.dv, 8 * u);
  if (gc.dmask.defined()) check_bounded("dmask", gc.dmask, gg.dmask, m.dmask, 8 * u);
}

}  // namespace

TEST_CASE("sdpa on the tensor cores: bfloat16 and float16 against the CPU, outputs poisoned") {
  TensorCores on(true);
  std::mt19937_64 rng(2028);
  int several_tiles = 0, element_loads = 0;
  for (int n = 0; n < 200; ++n) {
    const Config c = random_config(rng);
    const DType dt = n % 2 ? kFloat16 : kBFloat16;
    INFO("config " << n << " (" << dtype_name(dt) << "): " << describe(c));
    several_tiles += c.Sq > 64 && c.Skv > 64;
    element_loads += c.layout == Layout::Misaligned || c.Dqk % 8 != 0 || c.Dv % 8 != 0;
    compare_config(c, dt, 7000 + static_cast<uint64_t>(n) * 10, rng);
  }
  CHECK(several_tiles > 40);
  CHECK(element_loads > 40);
}

TEST_CASE("sdpa on the tensor cores: the backward is deterministic (bitwise equal run to run)") {
  TensorCores on(true);
  const Tensor q = tgtest::rnd({2, 4, 150, 64}, 1).to(kBFloat16).to(kCUDA);
  const Tensor k = tgtest::rnd({2, 2, 130, 64}, 2).to(kBFloat16).to(kCUDA);
  const Tensor v = tgtest::rnd({2, 2, 130, 64}, 3).to(kBFloat16).to(kCUDA);
  const Tensor dout = tgtest::rnd({2, 4, 150, 64}, 4).to(kBFloat16).to(kCUDA);
  SdpaOptions o;
  o.dropout_p = 0.2;
  o.seed = 5;
  const SdpaResult r = sdpa_forward(q, k, v, o);
  const SdpaGrads a = sdpa_backward(q, k, v, r.out, dout, r.stats, o);
  const SdpaGrads b = sdpa_backward(q, k, v, r.out, dout, r.stats, o);
  for (const auto& [x, y] : {std::pair{a.dq, b.dq}, {a.dk, b.dk}, {a.dv, b.dv}})
    CHECK(x.to(kFloat32).to_vector<float>() == y.to(kFloat32).to_vector<float>());
}

TEST_CASE("sdpa on the tensor cores: fully masked rows give zeros and -inf statistics") {
  TensorCores on(true);
  const Tensor q = tgtest::rnd({1, 1, 4, 64}, 1).to(kBFloat16).to(kCUDA);
  const Tensor k = tgtest::rnd({1, 1, 6, 64}, 2).to(kBFloat16).to(kCUDA);
  SdpaOptions o;
  o.mask =
      from_vector(std::vector<bool>(24, false), {1, 1, 4, 6}, TensorOptions(kBool).device(kCUDA));
  const SdpaResult res = sdpa(q, k, k, o);
  for (float x : res.out.to(kFloat32).to_vector<float>()) CHECK(x == 0.0f);
  for (float s : res.stats.to_vector<float>()) CHECK(std::isinf(s));
}

TEST_CASE("sdpa on the tensor cores: the switch changes which kernels run") {
  // Off, bfloat16 runs the float32 kernels on widened copies; on, the tensor-core kernels, whose
  // P is rounded to bfloat16: both agree with the CPU, and with each other only to that
  // rounding, so bitwise equality would mean the switch reached nothing.
  const Tensor q = tgtest::rnd({1, 2, 200, 64}, 1).to(kBFloat16);
  const Tensor k = tgtest::rnd({1, 2, 200, 64}, 2).to(kBFloat16);
  const Tensor v = tgtest::rnd({1, 2, 200, 64}, 3).to(kBFloat16);
  const Tensor cpu = sdpa(q, k, v).out;
  auto on_gpu = [&](bool tensor_cores) {
    TensorCores mode(tensor_cores);
    return sdpa(q.to(kCUDA), k.to(kCUDA), v.to(kCUDA)).out.to(kCPU);
  };
  const Tensor with = on_gpu(true), without = on_gpu(false);
  check_close("tensor cores", cpu, with, 4 * unit(kBFloat16));
  check_close("widened", cpu, without, 2 * unit(kBFloat16));
  CHECK(with.to(kFloat32).to_vector<float>() != without.to(kFloat32).to_vector<float>());
}

TEST_CASE("sdpa on the tensor cores: float32 as 3xTF32 under precision \"high\"") {
  // Not yet run on a GPU when written (2026-11-24): the next session with one runs it first.
  TensorCores on(true);
  Float32Precision high("high");
  std::mt19937_64 rng(2029);
  for (int n = 0; n < 100; ++n) {
    const Config c = random_config(rng);
    INFO("config " << n << " (float32): " << describe(c));
    compare_config(c, kFloat32, 9000 + static_cast<uint64_t>(n) * 10, rng);
  }
  // "highest" keeps the float32 SIMT kernels: the two agree with the CPU but not bitwise with
  // each other, or the setting reached nothing.
  const Tensor q = tgtest::rnd({1, 2, 200, 64}, 1), k = tgtest::rnd({1, 2, 200, 64}, 2);
  const Tensor v = tgtest::rnd({1, 2, 200, 64}, 3);
  auto on_gpu = [&](const std::string& precision) {
    Float32Precision mode(precision);
    return sdpa(q.to(kFloat32).to(kCUDA), k.to(kFloat32).to(kCUDA), v.to(kFloat32).to(kCUDA))
        .out.to(kCPU);
  };
  const Tensor split = on_gpu("high"), exact = on_gpu("highest");
  const Tensor cpu = sdpa(q.to(kFloat32), k.to(kFloat32), v.to(kFloat32)).out;
  check_close("3xTF32", cpu, split, 4 * unit(kFloat32));
  check_close("float32", cpu, exact, 1e-5);
  CHECK(split.to_vector<float>() != exact.to_vector<float>());
}

TEST_CASE("sdpa on the tensor cores: 32 rows per warp, against the CPU and bitwise against 16") {
  // Not yet run on a GPU when written (2026-11-25, session 30): the next session with one runs
  // it first.
  TensorCores on(true);
  {
    WarpRows rows(32);
    std::mt19937_64 rng(2030);
    int two_blocks = 0;
    for (int n = 0; n < 120; ++n) {
      const Config c = random_config(rng);
      const DType dt = n % 3 == 0 ? kBFloat16 : n % 3 == 1 ? kFloat16 : kFloat32;
      Float32Precision high("high");  // float32 on the tensor cores (3xTF32)
      INFO("config " << n << " (" << dtype_name(dt) << ", 32 rows per warp): " << describe(c));
      two_blocks += c.Sq > 128;
      compare_config(c, dt, 11000 + static_cast<uint64_t>(n) * 10, rng);
    }
    CHECK(two_blocks > 20);
  }
  // Where every tile is interior (no option, whole tiles) and the key tiles keep their width
  // (head dims up to 64), a row's sums run in the same order whichever warp holds it, so two
  // slices per warp must give the bits of one: a slice reading or writing another's rows would
  // not.
  for (const auto& [d, dt] : {std::pair{int64_t{64}, kBFloat16}, {int64_t{32}, kFloat16}}) {
    const Tensor q = tgtest::rnd({2, 4, 256, d}, 1).to(dt).to(kCUDA);
    const Tensor k = tgtest::rnd({2, 2, 192, d}, 2).to(dt).to(kCUDA);
    const Tensor v = tgtest::rnd({2, 2, 192, d}, 3).to(dt).to(kCUDA);
    const Tensor dout = tgtest::rnd({2, 4, 256, d}, 4).to(dt).to(kCUDA);
    auto run = [&](int rows) {
      WarpRows mode(rows);
      const SdpaResult r = sdpa_forward(q, k, v, {});
      const SdpaGrads g = sdpa_backward(q, k, v, r.out, dout, r.stats, {});
      std::vector<std::vector<float>> all;
      for (const Tensor& t : {r.out, r.stats, g.dq, g.dk, g.dv})
        all.push_back(t.to(kFloat32).to(kCPU).to_vector<float>());
      return all;
    };
    INFO("head dim " << d << ", " << dtype_name(dt));
    CHECK(run(16) == run(32));
  }
}
