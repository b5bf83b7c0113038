// The ragged and paged layouts on CUDA against the CPU: ragged sdpa over random configurations
// (float32 through the tiled and the simple kernels, float64, bfloat16) with NaN-poisoned
// device allocations, sdpa_paged reading the blocks in place and gathered, create_graph through
// the ragged layout, and the model's packed training steps and paged decoding.
#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>

#include "cuda_parity.h"
#include "sdpa_random.h"

using namespace tg;
using namespace cudatest;
using tgtest::offsets;
using tgtest::RaggedConfig;

namespace {

// Up to 4 sequences of 0 to 20 rows, or sometimes 0 to 150 (several 64-row tiles); head dims
// on both sides of the tiled kernels' 128.
RaggedConfig random_config(std::mt19937_64& rng) {
  tgtest::Draws draw{rng};
  const int64_t dims[] = {8, 16, 32, 40, 64, 72, 96, 128, 160};
  RaggedConfig c;
  const int64_t B = draw.pick(1, 4), longest = draw.coin(0.3) ? 150 : 20;
  c.draw_lengths_and_heads(draw, B, longest);
  c.D = dims[draw.pick(0, 8)];
  c.Dv = draw.coin(0.6) ? c.D : dims[draw.pick(0, 8)];
  c.opts = tgtest::random_sdpa_options(rng, {.causal = 0.5, .max_window = 40, .alibi = 0.2});
  if (draw.coin(0.4)) {  // a mask broadcast from a random subset of (B, Hq, max Sq, max Skv)
    c.mask_shape = {draw.coin(0.5) ? B : 1, draw.coin(0.5) ? c.Hq : 1,
                    draw.coin(0.8) ? c.max_q() : 1, draw.coin(0.9) ? c.max_kv() : 1};
    c.mask_kind = draw.coin(0.5) ? 2 : 1;
  }
  c.strided = draw.coin(0.3);
  return c;
}

// One configuration's tensors on the CPU (float64) and the options for `device`.
struct RaggedCall {
  Tensor q, k, v, dout, mask;
  std::vector<int64_t> cu_q, cu_kv;
  SdpaOptions options(const RaggedConfig& c, Device device) const {
    SdpaOptions o = c.opts;
    const TensorOptions idx = TensorOptions(kInt64).device(device);
    o.cu_seqlens_q = from_vector(cu_q, {c.B() + 1}, idx);
    o.cu_seqlens_kv = from_vector(cu_kv, {c.B() + 1}, idx);
    if (mask.defined()) o.mask = mask.to(device);
    return o;
  }
};

RaggedCall make_call(const RaggedConfig& c, uint64_t seed) {
  RaggedCall r;
  r.cu_q = offsets(c.len_q);
  r.cu_kv = offsets(c.len_kv);
  r.q = tgtest::rnd({r.cu_q.back(), c.Hq, c.D}, seed);
  r.k = tgtest::rnd({r.cu_kv.back(), c.Hk, c.D}, seed + 1);
  r.v = tgtest::rnd({r.cu_kv.back(), c.Hk, c.Dv}, seed + 2);
  r.dout = tgtest::rnd({r.cu_q.back(), c.Hq, c.Dv}, seed + 3);
  if (c.mask_kind)
    r.mask = c.mask_kind == 2 ? gt(tgtest::rnd(c.mask_shape, seed + 4), -0.6)  // some rows empty
                              : tgtest::rnd(c.mask_shape, seed + 4, -3, 1);
  return r;
}

// t in dtype dt on `device`; strided: stored heads outermost, (H, T, D), seen as (T, H, D).
Tensor placed(const Tensor& t, DType dt, Device device, bool strided) {
  const Tensor x = t.to(dt).to(device);
  return strided ? x.transpose(0, 1).contiguous().transpose(0, 1) : x;
}

// Forward and backward of one call in dtype dt on both devices (the device's allocations
// poisoned with NaN, so an element no kernel writes fails), compared.
void compare_devices(const RaggedConfig& c, const RaggedCall& call, DType dt, double tol,
                     double grad_tol) {
  CAPTURE(dt);
  SdpaOptions cpu = call.options(c, kCPU), gpu = call.options(c, kCUDA);
  if (c.mask_kind == 1) {
    cpu.mask = cpu.mask->to(dt);
    gpu.mask = gpu.mask->to(dt);
  }
  const Tensor q = placed(call.q, dt, kCPU, false), k = placed(call.k, dt, kCPU, false);
  const Tensor v = placed(call.v, dt, kCPU, false), dout = call.dout.to(dt);
  const Tensor gq = placed(call.q, dt, kCUDA, c.strided), gk = placed(call.k, dt, kCUDA, c.strided);
  const Tensor gv = placed(call.v, dt, kCUDA, c.strided), gdout = dout.to(kCUDA);
  const SdpaResult rc = sdpa_forward(q, k, v, cpu);
  const SdpaGrads gc = sdpa_backward(q, k, v, rc.out, dout, rc.stats, cpu);
  cuda_poison_allocations(true);
  const SdpaResult rg = sdpa_forward(gq, gk, gv, gpu);
  const SdpaGrads gg = sdpa_backward(gq, gk, gv, rg.out, gdout, rg.stats, gpu);
  cuda_poison_allocations(false);
  compare("out", rc.out, rg.out, tol);
  compare("stats", rc.stats, rg.stats, tol);
  compare("dq", gc.dq, gg.dq, grad_tol);
  compare("dk", gc.dk, gg.dk, grad_tol);
  compare("dv", gc.dv, gg.dv, grad_tol);
  if (gc.dmask.defined()) compare("dmask", gc.dmask, gg.dmask, grad_tol);
}

// A float32 model as the CLI trains them, small: 4 query heads sharing 2 key/value heads.
nn::TransformerConfig small_config() {
  return {.vocab = 37, .d_model = 32, .layers = 2, .heads = 4, .kv_heads = 2};
}

// A paged call in dtype dt: pools of `blocks` blocks of `block` keys (Hk = 2 heads, D = 64),
// a (B, pages) block table, the B sequences' key counts, ragged queries (Hq = 4) at offsets
// cu_q, causal bottom-right; the CPU's options and the device's.
struct PagedCall {
  Tensor k_pool, v_pool, q, table, lengths;
  SdpaOptions cpu, gpu;
  SdpaResult on_cpu() const { return sdpa_paged(q, k_pool, v_pool, table, lengths, cpu); }
  // Without gradients: the kernel reads the blocks in place (SdpaParams::kv_rows).
  SdpaResult in_place_on_gpu() const {
    NoGradGuard no_grad;
    return sdpa_paged(q.to(kCUDA), k_pool.to(kCUDA), v_pool.to(kCUDA), table.to(kCUDA),
                      lengths.to(kCUDA), gpu);
  }
};

PagedCall paged_call(DType dt, int64_t block, int64_t blocks, const std::vector<int64_t>& table,
                     const std::vector<int64_t>& lengths, const std::vector<int64_t>& cu_q) {
  const int64_t B = static_cast<int64_t>(lengths.size()), Hq = 4, Hk = 2, D = 64;
  PagedCall c;
  c.k_pool = tgtest::rnd({blocks, block, Hk, D}, 1).to(dt);
  c.v_pool = tgtest::rnd({blocks, block, Hk, D}, 2).to(dt);
  c.q = tgtest::rnd({cu_q.back(), Hq, D}, 3).to(dt);
  c.table = from_vector(table, {B, static_cast<int64_t>(table.size()) / B});
  c.lengths = from_vector(lengths, {B});
  c.cpu.causal = true;
  c.cpu.causal_align = CausalAlign::BottomRight;
  c.cpu.cu_seqlens_q = from_vector(cu_q, {B + 1});
  c.gpu = c.cpu;
  c.gpu.cu_seqlens_q = c.cpu.cu_seqlens_q->to(kCUDA);
  return c;
}

}  // namespace

TEST_CASE("ragged sdpa: CUDA against CPU over random configurations, outputs poisoned") {
  std::mt19937_64 rng(2027);
  int tiled = 0, several_tiles = 0;
  for (int n = 0; n < 80; ++n) {
    const RaggedConfig c = random_config(rng);
    const RaggedCall call = make_call(c, 4000 + static_cast<uint64_t>(n) * 10);
    INFO("config " << n << ": " << c.describe());
    tiled += std::max(c.D, c.Dv) <= 128;
    several_tiles += c.max_q() > 64 || c.max_kv() > 64;
    compare_devices(c, call, kFloat32, 2e-5, 1e-4);
    // float64 runs the simple kernels, to float64 rounding.
    if (n % 4 == 0) compare_devices(c, call, kFloat64, 1e-12, 1e-12);
    // bfloat16: the CPU reads the 16-bit rows in place, CUDA through float32 stand-ins of the
    // packed tensors; both accumulate in float32 and round once, so they differ by at most a
    // bfloat16 rounding (2^-8) of the larger results.
    if (n % 8 == 0) compare_devices(c, call, kBFloat16, 0x1p-7, 0x1p-6);
  }
  CHECK(tiled > 40);
  CHECK(several_tiles > 10);
}

TEST_CASE("ragged and paged sdpa on the tensor cores: 16-bit against the CPU") {
  // The tensor-core kernels (bfloat16, float16) at each sequence's own rows and, for
  // sdpa_paged, keys read through the block table in place; tolerances as in
  // test_cuda_sdpa_mma.cpp (P and dS rounded to 16 bits before their products), here per
  // element with an absolute floor: 4u for the forward, 8u for the gradients.
  const bool was = cuda_sdpa_tensor_cores();
  set_cuda_sdpa_tensor_cores(true);
  std::mt19937_64 rng(2029);
  for (int n = 0; n < 30; ++n) {
    const RaggedConfig c = random_config(rng);
    const RaggedCall call = make_call(c, 9000 + static_cast<uint64_t>(n) * 10);
    INFO("config " << n << ": " << c.describe());
    const DType dt = n % 2 ? kFloat16 : kBFloat16;
    const double u = dt == kBFloat16 ? 0x1p-8 : 0x1p-11;
    compare_devices(c, call, dt, 4 * u, 8 * u);
    // Every third one again with dQ summed by the dK/dV pass (atomic adds): each sequence's
    // rows of the sums.
    if (n % 3 == 0) {
      set_cuda_sdpa_deterministic(false);
      INFO("dQ summed by the dK/dV pass");
      compare_devices(c, call, dt, 4 * u, 8 * u);
      set_cuda_sdpa_deterministic(true);
    }
  }
  // Two sequences of 9 and 70 keys in blocks of 16 of a shuffled pool, 1 and 3 new queries.
  const PagedCall paged =
      paged_call(kBFloat16, 16, 8, {6, -1, -1, -1, -1, 3, 0, 7, 2, 5}, {9, 70}, {0, 1, 4});
  const SdpaResult want = paged.on_cpu(), got = paged.in_place_on_gpu();
  compare("paged out, in place", want.out, got.out, 0x1p-6);
  compare("paged stats, in place", want.stats, got.stats, 1e-5);
  set_cuda_sdpa_tensor_cores(was);
}

TEST_CASE("sdpa_paged on CUDA: blocks read in place and gathered, as the CPU reads them") {
  // Three sequences of 0, 5 and 37 keys in blocks of 4 placed in a shuffled pool; ragged
  // queries (1, 3 and 2 new rows), causal bottom-right, GQA, ALiBi.
  const int64_t block = 4, blocks = 16, pages = 10;
  std::mt19937_64 rng(5);
  std::vector<int64_t> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const std::vector<int64_t> lengths{0, 5, 37};
  std::vector<int64_t> table(3 * pages, -1);
  size_t next = 0;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t p = 0; p * block < lengths[b]; ++p) table[b * pages + p] = order[next++];
  PagedCall paged = paged_call(kFloat32, block, blocks, table, lengths, {0, 1, 4, 6});
  paged.cpu.alibi = paged.gpu.alibi = true;
  const SdpaResult want = paged.on_cpu();
  {
    const SdpaResult got = paged.in_place_on_gpu();
    compare("out, in place", want.out, got.out, 2e-5);
    compare("stats, in place", want.stats, got.stats, 2e-5);
  }
  // With gradients: gathered, the pools' gradient flowing back through the gather.
  const Tensor& q = paged.q;
  const Tensor& t = paged.table;
  const Tensor& len = paged.lengths;
  Tensor kc = paged.k_pool.detach().requires_grad_(), kg = paged.k_pool.to(kCUDA).requires_grad_();
  const Tensor w = tgtest::rnd(q.sizes(), 4).to(kFloat32);
  sum(mul(sdpa_paged(q, kc, paged.v_pool, t, len, paged.cpu).out, w)).backward();
  const SdpaResult got =
      sdpa_paged(q.to(kCUDA), kg, paged.v_pool.to(kCUDA), t.to(kCUDA), len.to(kCUDA), paged.gpu);
  sum(mul(got.out, w.to(kCUDA))).backward();
  compare("out, gathered", want.out, got.out, 2e-5);
  compare("k_pool gradient", kc.grad(), kg.grad(), 1e-4);
}

TEST_CASE("create_graph through the ragged layout on CUDA: second derivatives as the CPU's") {
  // float64: the CUDA double backward is the padded composition of ops; the CPU's is its tiled
  // kernel reading the packed rows.
  const std::vector<int64_t> cu_q{0, 3, 3, 8}, cu_kv{0, 4, 6, 13};
  const Tensor q = tgtest::rnd({8, 2, 8}, 1), k = tgtest::rnd({13, 1, 8}, 2);
  const Tensor v = tgtest::rnd({13, 1, 6}, 3), dout = tgtest::rnd({8, 2, 6}, 4);
  const Tensor mask = tgtest::rnd({3, 1, 5, 7}, 5);
  const auto second = [&](Device d) {
    SdpaOptions o;
    o.causal = true;
    o.causal_align = CausalAlign::BottomRight;
    o.softcap = 2.5;
    o.dropout_p = 0.2;
    o.seed = 3;
    const TensorOptions idx = TensorOptions(kInt64).device(d);
    o.cu_seqlens_q = from_vector(cu_q, {4}, idx);
    o.cu_seqlens_kv = from_vector(cu_kv, {4}, idx);
    return tgtest::second_order(sdpa, q.to(d), k.to(d), v.to(d), dout.to(d), mask.to(d), o, 9);
  };
  const std::vector<Tensor> want = second(kCPU), got = second(kCUDA);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) compare("second-order gradient", want[i], got[i], 1e-10);
}

TEST_CASE("packed training steps on CUDA track the CPU's: losses and parameters") {
  nn::TransformerConfig cfg = small_config();
  cfg.vocab = 256;  // the tasks' tokens are bytes
  cfg.attn_dropout = 0.1;
  auto task = nn::make_task("reverse", 8, /*random_sizes=*/true);
  check_training_parity(
      cfg, 3, 4,
      [&](int64_t step) {
        nn::Batch batch = nn::task_packed_batch(*task, 96, 1, step);
        REQUIRE(batch.packed());
        return batch;
      },
      "packed steps");
}

TEST_CASE("paged decoding on CUDA: every step's logits as the CPU's") {
  const nn::TransformerConfig cfg = small_config();
  nn::Transformer cpu_model(cfg, 4), gpu_model(cfg, 4);
  gpu_model.to(kCUDA);
  NoGradGuard no_grad;
  // Blocks of 4 in a pool of 2 that must grow; three sequences: a prefill of 3, 7 and 0 tokens,
  // then steps of one token each (the third joining late), then a chunk of 5 for the first.
  nn::PagedKVCache cc = cpu_model.paged_cache(4, 2), gc = gpu_model.paged_cache(4, 2);
  for (int b = 0; b < 3; ++b) {
    cc.add_sequence();
    gc.add_sequence();
  }
  const std::vector<std::vector<int64_t>> steps{{3, 7, 0}, {1, 1, 1}, {1, 1, 1}, {5, 0, 1}};
  int64_t token = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    std::vector<int64_t> ids;
    for (int64_t n : steps[s])
      for (int64_t i = 0; i < n; ++i) ids.push_back(token++ % cfg.vocab);
    const Tensor t = from_vector(ids, {static_cast<int64_t>(ids.size())});
    const Tensor want = cpu_model.forward(t, steps[s], cc);
    const Tensor got = gpu_model.forward(t.to(kCUDA), steps[s], gc);
    compare("logits of step " + std::to_string(s), want, got, 1e-4);
  }
}

namespace {
// How many reads from the device (each a wait for the work queued before it) `f` makes.
template <class F>
int64_t reads_back(F&& f) {
  reset_kernel_profile();
  set_kernel_profiling(true);
  f();
  set_kernel_profiling(false);
  const auto prof = kernel_profile();
  const auto it = prof.find("read_back");
  return it == prof.end() ? 0 : it->second.calls;
}
}  // namespace

TEST_CASE("reads from the device: one a decoding step, paged or contiguous; none for a loss") {
  // The one read is the embedding's range check of ids picked on the device. A paged step's
  // offsets and cache slots, made on the host, are checked there from the values kept when they
  // were sent (sdpa in every layer, index_copy_ twice a layer); a packed batch's offsets and
  // RoPE positions alike.
  const nn::TransformerConfig cfg = small_config();
  nn::Transformer model(cfg, 4);
  model.to(kCUDA);
  NoGradGuard no_grad;
  const TensorOptions on_gpu = TensorOptions(kInt64).device(kCUDA);
  // Blocks of 4: the prefill of 4 and 2 tokens fills the 2 blocks, the step takes a third
  // (the pools grow, reading nothing).
  nn::PagedKVCache paged = model.paged_cache(4, 2);
  paged.add_sequence();
  paged.add_sequence();
  const Tensor prefill = model.forward(
      from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {6}, on_gpu), {4, 2}, paged);
  const Tensor next =
      argmax(embedding(prefill, from_vector(std::vector<int64_t>{3, 5}, {2}, on_gpu)),
             -1);  // (2), on the device
  CHECK(reads_back([&] { model.forward(next, {1, 1}, paged); }) == 1);
  CHECK(paged.capacity() == 4);
  nn::KVCache contiguous;
  model.forward(from_vector(std::vector<int64_t>{1, 2, 3, 4}, {2, 2}, on_gpu), contiguous);
  CHECK(reads_back([&] { model.forward(next.view({2, 1}), contiguous); }) == 1);
  Generator dropout{1, 0};
  const Tensor cu = from_vector(std::vector<int64_t>{0, 4, 6}, {3});  // on the host
  const Tensor six = argmax(prefill, -1);                             // (6), on the device
  CHECK(reads_back([&] { model.forward(six, cu, dropout); }) == 1);
  // A batch's loss, padded or packed, from the host's ids and targets (a training step's
  // forward, an ignored target among them): nothing read back.
  const Tensor ids = from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor targets = from_vector(std::vector<int64_t>{2, 3, -100, 5, 6, 7}, {2, 3});
  CHECK(reads_back([&] { nn::batch_loss(model, {ids, targets}, dropout); }) == 0);
  CHECK(reads_back([&] {
          nn::batch_loss(model, {ids.reshape({6}), targets.reshape({6}), cu}, dropout);
        }) == 0);
}
