// CUDA against CPU for the ops: one table of op cases (float32, shapes with broadcast and
// non-contiguous views; see cuda_parity.h). Then what a table cannot say: bit-identical random
// streams, the embedding gradient's order of additions, float64, the caching allocator,
// queued host-to-device copies, the host copies of offsets, device errors, and a transformer's
// training steps on both devices.
#include <cmath>
#include <string>

#include "cuda_parity.h"
#include "op_table.h"
#include "ops/host_values.h"

using namespace tg;
using namespace cudatest;

namespace {

// Every row of the op table (op_table.h), plain, with its inputs' last two dims transposed
// in memory, and broadcast for the elementwise rows.
std::vector<OpCase> op_table_cases() {
  using optable::Layout;
  std::vector<OpCase> cases;
  for (const optable::OpInfo& op : optable::op_table()) {
    cases.push_back({op.label(),
                     [&op] { return optable::make_inputs(op, Layout::Plain, kFloat32, true); },
                     op.call, op.tol32, op.tol32});
    optable::OpInfo swapped = op;  // leaves stored transposed, seen through a transpose
    for (Shape& s : swapped.shapes)
      if (s.size() >= 2) std::swap(s[s.size() - 1], s[s.size() - 2]);
    cases.push_back(
        {op.label() + " (transposed views)",
         [swapped] { return optable::make_inputs(swapped, Layout::Plain, kFloat32, true); },
         [&op](const Inputs& in) {
           Inputs views;
           for (const Tensor& t : in) views.push_back(t.dim() >= 2 ? t.transpose(-1, -2) : t);
           return op.call(views);
         },
         op.tol32, op.tol32});
    if (op.elementwise) {
      cases.push_back(
          {op.label() + " (broadcast)",
           [&op] { return optable::make_inputs(op, Layout::Broadcast, kFloat32, true); },
           optable::call_for(op, Layout::Broadcast), op.tol32, op.tol32});
    }
    // 16-bit: each device rounds its float32 result once, so the two differ by at most one
    // 16-bit step (2u relative) where their float32 results straddle a rounding boundary. The
    // gradients chain the backward formulas' ops, each rounding once: allowed 8u.
    for (DType h : {kBFloat16, kFloat16}) {
      const double u = h == kBFloat16 ? 0x1p-8 : 0x1p-11;
      cases.push_back({op.label() + (h == kBFloat16 ? " (bfloat16)" : " (float16)"),
                       [&op, h] {
                         Inputs in = optable::make_inputs(op, Layout::Plain, kFloat32, true);
                         for (Tensor& t : in) {
                           if (!is_floating(t.dtype())) continue;
                           const bool grad = t.requires_grad();
                           t = t.detach().to(h);
                           if (grad) t.requires_grad_();
                         }
                         return in;
                       },
                       op.call, 2 * u + op.tol32, 8 * u});
    }
  }
  return cases;
}

// What the table does not say: ops chained, NaN, dtype copies, joins of views.
std::vector<OpCase> elementwise_cases() {
  std::vector<OpCase> cases;
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

}  // namespace

TEST_CASE("parity: every op of the op table") { run_all(op_table_cases()); }
TEST_CASE("parity: elementwise chains, NaN, views and dtype copies") {
  run_all(elementwise_cases());
}
TEST_CASE("parity: reductions") { run_all(reduction_cases()); }
TEST_CASE("parity: matmul through cuBLAS") { run_all(matmul_cases()); }
TEST_CASE("parity: nn ops (softmax, cross-entropy, embedding, rms_norm, rope, swiglu, dropout)") {
  run_all(nn_cases());
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

TEST_CASE("index_copy_ on CUDA writes the CPU's rows (the paged cache's writes)") {
  const Tensor ids = from_vector(std::vector<int64_t>{5, 0, 3}, {3});
  for (DType t : {kFloat32, kBFloat16}) {
    const Tensor src = tgtest::rnd({3, 2, 4}, 9).to(t);
    Tensor cpu = zeros({6, 2, 4}, t), gpu = zeros({6, 2, 4}, TensorOptions(t).device(kCUDA));
    cpu.index_copy_(0, ids, src);
    gpu.index_copy_(0, ids.to(kCUDA), src.to(kCUDA));
    CHECK(cpu.to(kFloat32).to_vector<float>() == gpu.to(kFloat32).to_vector<float>());
  }
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

TEST_CASE("float32 matmul: \"high\" lets cuBLAS use TF32, \"highest\" does not") {
  // Passed on an H100 (2026-11-26). TF32 keeps 10 of float32's 23 mantissa
  // bits: an operand rounded (or truncated) to it is within 2^-10 of itself, a product within
  // about 2^-9 of |a||b|, so the result within 2^-9 |A||B| (the float32 sums of 96 terms add
  // ~2^-17); plain float32 within 1e-5 of the float64 product.
  const Tensor a = tgtest::rnd({64, 96}, 1), b = tgtest::rnd({96, 48}, 2);
  const Tensor exact = matmul(a, b), bound = matmul(abs(a), abs(b));
  auto on_gpu = [&](const char* precision) {
    const std::string was = float32_matmul_precision();
    set_float32_matmul_precision(precision);
    const Tensor c = matmul(a.to(kFloat32).to(kCUDA), b.to(kFloat32).to(kCUDA)).to(kCPU);
    set_float32_matmul_precision(was);
    return c.to(kFloat64);
  };
  const Tensor tf32 = on_gpu("high"), fp32 = on_gpu("highest");
  CHECK(max(abs(tf32 - exact) - bound * 0x1p-9).item<double>() <= 0);
  CHECK(max(abs(fp32 - exact) - bound * 1e-5).item<double>() <= 0);
  CHECK(max(abs(tf32 - fp32)).item<double>() > 0);  // the setting reached cuBLAS
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

TEST_CASE("host-to-device copies are queued behind running kernels and arrive whole") {
  // A long product queued first keeps the copies pending while the 32 staging slots are
  // reused: each copy's bytes must be its own, though its host buffer is gone when
  // from_vector returns. Copy 98 spans three 64 KiB slots; the last is above the 1 MiB that
  // go through the slots (the waited path).
  Tensor a = randn({2048, 2048}, TensorOptions().device(kCUDA));
  Tensor busy = matmul(matmul(a, a), a);
  std::vector<Tensor> copies;
  std::vector<std::vector<int64_t>> expected;
  for (int64_t i = 0; i < 100; ++i) {
    const int64_t n = i == 99 ? 140000 : i == 98 ? 20000 : 1 + (i * 37) % 900;
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) v[static_cast<size_t>(j)] = i * 1000003 + j;
    copies.push_back(from_vector(v, {n}).to(kCUDA));
    expected.push_back(std::move(v));
  }
  CHECK(std::isfinite(sum(busy).item<double>()));
  for (size_t i = 0; i < copies.size(); ++i) {
    INFO("copy " << i);
    CHECK(copies[i].to_vector<int64_t>() == expected[i]);
  }
}

TEST_CASE("host_int64: a device tensor's values, read again after every in-place change") {
  Tensor t = from_vector(std::vector<int64_t>{0, 3, 5, 9}, {4}).to(kCUDA);
  CHECK(detail::host_int64(t) == std::vector<int64_t>{0, 3, 5, 9});
  CHECK(detail::host_int64(t) == std::vector<int64_t>{0, 3, 5, 9});           // kept
  CHECK(detail::host_int64(t.slice(0, 1, 3)) == std::vector<int64_t>{3, 5});  // another view
  t.copy_(from_vector(std::vector<int64_t>{0, 1, 2, 4}, {4}).to(kCUDA));
  CHECK(detail::host_int64(t) == std::vector<int64_t>{0, 1, 2, 4});
  CHECK(detail::host_int64(t.slice(0, 1, 3)) == std::vector<int64_t>{1, 2});
  t.fill_(7);
  CHECK(detail::host_int64(t) == std::vector<int64_t>{7, 7, 7, 7});
  // More tensors than are kept, each read twice: every read its own values.
  for (int64_t i = 0; i < 20; ++i) {
    Tensor u = from_vector(std::vector<int64_t>{i, i + 1}, {2}).to(kCUDA);
    CHECK(detail::host_int64(u) == std::vector<int64_t>{i, i + 1});
    CHECK(detail::host_int64(u) == std::vector<int64_t>{i, i + 1});
  }
  // Made from host values: kept from the start, read from the device only once changed there;
  // host_range from the kept values, or in one read.
  reset_kernel_profile();
  set_kernel_profiling(true);
  Tensor made = detail::int64_to_device({4, 8, 15, 16}, {2, 2}, kCUDA);
  CHECK(detail::host_int64(made) == std::vector<int64_t>{4, 8, 15, 16});
  CHECK(detail::host_range(made).lo == 4);
  CHECK(kernel_profile().count("read_back") == 0);
  made.add_(1);
  CHECK(detail::host_int64(made.transpose(0, 1)) == std::vector<int64_t>{5, 16, 9, 17});
  CHECK(kernel_profile()["read_back"].calls == 1);
  const detail::Int64Range r = detail::host_range(made.slice(1, 0, 1));
  CHECK((r.lo == 5 && r.hi == 16));
  CHECK(kernel_profile()["read_back"].calls == 2);
  set_kernel_profiling(false);
  // Ragged sdpa after its offsets changed in place: the new sequences, as the CPU computes them.
  Tensor q = randn({6, 2, 8}), cu = from_vector(std::vector<int64_t>{0, 2, 6}, {3});
  Tensor qd = q.to(kCUDA), cud = cu.to(kCUDA);
  SdpaOptions o;
  o.causal = true;
  o.cu_seqlens_q = o.cu_seqlens_kv = cud;
  sdpa(qd, qd, qd, o);
  cud.copy_(from_vector(std::vector<int64_t>{0, 5, 6}, {3}).to(kCUDA));
  cu.copy_(from_vector(std::vector<int64_t>{0, 5, 6}, {3}));
  const Tensor on_gpu = sdpa(qd, qd, qd, o).out.to(kCPU);
  o.cu_seqlens_q = o.cu_seqlens_kv = cu;
  CHECK(max(abs(on_gpu - sdpa(q, q, q, o).out)).item<double>() < 1e-5);
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

// The mixed-device rows of the bad-input table (test_error_inputs.cpp has the rest): every
// op-table row with two tensor inputs, its second on the GPU, and the ops that take a tensor
// beside their input (ids, targets, masks, lengths).
TEST_CASE("mixed devices: a GPU tensor beside a CPU one is an [op] error naming both") {
  for (const optable::OpInfo& op : optable::op_table()) {
    if (op.shapes.size() < 2) continue;
    CAPTURE(op.label());
    optable::Inputs in = optable::make_inputs(op, optable::Layout::Plain, kFloat32, false);
    in[1] = in[1].to(kCUDA);
    const std::string name = op.error_op.empty() ? op.name : op.error_op;
    tgtest::check_throws_with_prefix([&] { op.call(in); }, "[" + name + "]", "cuda:0");
  }
  const TensorOptions gpu = TensorOptions().device(kCUDA);
  const Tensor x = ones({2, 3}), ids = zeros({2}, TensorOptions(kInt64).device(kCUDA));
  tgtest::check_throws_with_prefix([&] { embedding(x, ids); }, "[embedding]", "cuda:0");
  tgtest::check_throws_with_prefix([&] { cross_entropy(x, ids); }, "[cross_entropy]", "cuda:0");
  tgtest::check_throws_with_prefix([&] { masked_fill(x, ones({3}, gpu).to(kBool), 0.0); },
                                   "[masked_fill]", "cuda:0");
  tgtest::check_throws_with_prefix([&] { Tensor(x.clone()).add_(ones({3}, gpu)); }, "[add_]",
                                   "cuda:0");
  const Tensor q = ones({1, 1, 2, 4});
  SdpaOptions with_mask;
  with_mask.mask = zeros({2, 2}, gpu);
  tgtest::check_throws_with_prefix([&] { sdpa(q, q, q, with_mask); }, "[sdpa]", "cuda:0");
  SdpaOptions with_lengths;
  with_lengths.seq_len_kv = ones({1}, TensorOptions(kInt64).device(kCUDA));
  tgtest::check_throws_with_prefix([&] { sdpa(q, q, q, with_lengths); }, "[sdpa]", "cuda:0");
  // copy_ moves across devices on purpose.
  Tensor host = zeros({3});
  host.copy_(ones({3}, gpu));
  CHECK(host.to_vector<float>() == std::vector<float>{1, 1, 1});
}

TEST_CASE("a transformer trains on CUDA: loss and gradients track the CPU's") {
  nn::TransformerConfig cfg;
  cfg.vocab = 256;  // byte tokens
  cfg.d_model = 32;
  cfg.layers = 2;
  cfg.heads = 4;
  cfg.kv_heads = 2;
  cfg.attn_dropout = 0.1;
  auto task = nn::make_task("reverse", 6);
  check_training_parity(
      cfg, 3, 5, [&](int64_t step) { return nn::task_batch(*task, 16, 1, step); }, "steps");
}
