// The model layer: RoPE, RMSNorm and SwiGLU gradients, whole-transformer gradcheck, modules,
// optimizers against hand-computed updates, the schedule, and the data tasks.
#include "ops/optimizer_ops.h"
#include "test_util.h"

using namespace tg;
using tgtest::rnd;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

namespace {
Tensor leaf(Tensor t) { return t.requires_grad_(true); }

nn::TransformerConfig tiny_config() { return tgtest::tiny_transformer_config(); }
}  // namespace

TEST_CASE("rope: rotates adjacent pairs by position * theta^(-2i/D)") {
  // One head, positions 0..2, D = 4: pair i rotates by t * theta^(-i/2).
  Tensor x = rnd({1, 1, 3, 4}, 3);
  RopeOptions o;
  o.theta = 100.0;
  o.offset = 2;
  std::vector<double> in = x.to_vector<double>(), got = rope(x, o).to_vector<double>();
  for (int t = 0; t < 3; ++t) {
    for (int i = 0; i < 2; ++i) {
      const double a = (t + 2) * std::pow(100.0, -2.0 * i / 4), c = std::cos(a), s = std::sin(a);
      const double e = in[t * 4 + 2 * i], od = in[t * 4 + 2 * i + 1];
      CHECK(got[t * 4 + 2 * i] == doctest::Approx(e * c - od * s).epsilon(1e-14));
      CHECK(got[t * 4 + 2 * i + 1] == doctest::Approx(e * s + od * c).epsilon(1e-14));
    }
  }
  // The inverse undoes it; dot products depend only on the relative position.
  o.inverse = true;
  tgtest::check_close(rope(rope(x, {100.0, 2}), o).to_vector<double>(), in, 1e-14);
  Tensor q = rnd({1, 1, 1, 8}, 4), k = rnd({1, 1, 1, 8}, 5);
  auto dot_at = [&](int64_t m, int64_t n) {
    return sum(mul(rope(q, {10000.0, m}), rope(k, {10000.0, n}))).item<double>();
  };
  CHECK(dot_at(7, 3) == doctest::Approx(dot_at(14, 10)).epsilon(1e-12));
  CHECK(dot_at(7, 3) != doctest::Approx(dot_at(7, 4)).epsilon(1e-6));
}

TEST_CASE("rope: gradcheck in both layouts, with an offset, on strided input") {
  Fn f = [](const std::vector<Tensor>& x) { return rope(x[0]); };
  CHECK_GRADCHECK(f, std::vector<Tensor>{leaf(rnd({2, 2, 3, 4}, 1))});
  RopeOptions o;
  o.seq_dim = -3;
  o.offset = 5;
  o.theta = 500;
  Fn g = [o](const std::vector<Tensor>& x) { return rope(x[0], o); };
  // (B, S, H, D) as a transposed view of (B, H, S, D) memory.
  CHECK_GRADCHECK(g, std::vector<Tensor>{leaf(rnd({2, 2, 3, 6}, 2)).transpose(1, 2)});
  // Second order: the backward is itself differentiable.
  Tensor x = leaf(rnd({1, 3, 4}, 6));
  Tensor y = rope(x);
  Tensor gx = tg::grad({sum(mul(y, y))}, {x})[0];
  tgtest::check_close(gx.to_vector<double>(), mul(x, 2.0).to_vector<double>(), 1e-13);
}

TEST_CASE("rope and rms_norm: bad input") {
  tgtest::check_throws_with_prefix([] { rope(rnd({2, 3})); }, "[rope]", "");
  tgtest::check_throws_with_prefix([] { rope(rnd({2, 3, 5})); }, "[rope]", "even last dim");
  tgtest::check_throws_with_prefix([] { rope(rnd({4})); }, "[rope]", "at least 2 dims");
  tgtest::check_throws_with_prefix([] { rope(rnd({2, 4}), {10000.0, -1}); }, "[rope]", "offset");
  RopeOptions o;
  o.seq_dim = -1;
  tgtest::check_throws_with_prefix([&] { rope(rnd({2, 4}), o); }, "[rope]", "seq_dim");
  tgtest::check_throws_with_prefix([] { rope(zeros({2, 4}, kInt64)); }, "[rope]", "");
  tgtest::check_throws_with_prefix(
      [] {
        rms_norm(rnd({2, 4}), rnd({3}));
      },
      "[rms_norm]", "'weight' must have shape [4]");
  tgtest::check_throws_with_prefix([] { rms_norm(rnd({2, 4}), ones({4})); }, "[rms_norm]", "");
}

TEST_CASE("rms_norm: values and gradcheck with broadcast and strided input") {
  Tensor x = rnd({2, 3}, 1), w = rnd({3}, 2);
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> got = rms_norm(x, w, 1e-5).to_vector<double>();
  for (int r = 0; r < 2; ++r) {
    double ms = 0;
    for (int c = 0; c < 3; ++c) ms += xv[r * 3 + c] * xv[r * 3 + c] / 3;
    for (int c = 0; c < 3; ++c) {
      CHECK(got[r * 3 + c] ==
            doctest::Approx(xv[r * 3 + c] / std::sqrt(ms + 1e-5) * wv[c]).epsilon(1e-13));
    }
  }
  Fn f = [](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-5); };
  CHECK_GRADCHECK(f, (std::vector<Tensor>{leaf(rnd({2, 3, 5}, 3)), leaf(rnd({5}, 4))}));
  CHECK_GRADCHECK(f,
                  (std::vector<Tensor>{leaf(rnd({5, 4}, 5)).transpose(0, 1), leaf(rnd({5}, 6))}));
  Fn g = [](const std::vector<Tensor>& in) { return rms_norm(in[0], Tensor()); };
  CHECK_GRADCHECK(g, std::vector<Tensor>{leaf(rnd({3, 4}, 7))});
}

TEST_CASE("swiglu: values against silu(gate) * up, gradcheck, errors") {
  Tensor x = rnd({2, 3, 8}, 12, -4, 4);
  Tensor want = mul(silu(x.slice(2, 0, 4)), x.slice(2, 4, 8));
  tgtest::check_close(swiglu(x).to_vector<double>(), want.to_vector<double>(), 1e-14);
  tgtest::check_close(swiglu(x.to(kFloat32)).to_vector<double>(), want.to_vector<double>(), 1e-6);
  Fn f = [](const std::vector<Tensor>& in) { return swiglu(in[0]); };
  CHECK_GRADCHECK(f, std::vector<Tensor>{leaf(rnd({3, 6}, 13, -3, 3))});
  CHECK_GRADCHECK(f, std::vector<Tensor>{leaf(rnd({6, 2, 3}, 14, -3, 3)).transpose(0, 2)});
  tgtest::check_throws_with_prefix([] { swiglu(rnd({2, 5})); }, "[swiglu]", "even dim");
  tgtest::check_throws_with_prefix([] { swiglu(zeros({2, 4}, kInt64)); }, "[swiglu]", "");
}

// The float32 kernel takes whole vectors of a row (simd::exp) and the scalar functors on the
// row's rest: the same gate and up values as one row of 48 pairs and as 16 rows of 3 must give
// the same bits, forward and backward.
TEST_CASE("swiglu on float32: a row's vectors and its scalar tail agree bit for bit") {
  Tensor gate = rnd({48}, 15, -9, 9).to(kFloat32), up = rnd({48}, 16, -3, 3).to(kFloat32);
  Tensor grad = rnd({48}, 17, -2, 2).to(kFloat32);
  Tensor wide = cat({gate.view({1, 48}), up.view({1, 48})}, 1);
  Tensor narrow = cat({gate.view({16, 3}), up.view({16, 3})}, 1);
  CHECK(swiglu(wide).to_vector<float>() == swiglu(narrow).to_vector<float>());
  Tensor dw = swiglu_backward(grad.view({1, 48}), wide),
         dn = swiglu_backward(grad.view({16, 3}), narrow);
  CHECK(dw.slice(1, 0, 48).to_vector<float>() == dn.slice(1, 0, 3).contiguous().to_vector<float>());
  CHECK(dw.slice(1, 48, 96).to_vector<float>() ==
        dn.slice(1, 3, 6).contiguous().to_vector<float>());
}

TEST_CASE("SwiGLU MLP: gradcheck through its input and weights") {
  Generator gen{3, 0};
  nn::MLP mlp(4, 6, gen, 0.5, kFloat64);
  std::vector<Tensor> inputs = {leaf(rnd({2, 3, 4}, 8))};
  for (auto& p : mlp.parameters()) inputs.push_back(p);
  // gradcheck perturbs its inputs in place, so the module sees the perturbed weights.
  Fn f = [&mlp](const std::vector<Tensor>& in) { return mlp.forward(in[0]); };
  CHECK_GRADCHECK(f, inputs);
  Fn g = [&mlp](const std::vector<Tensor>& in) { return mlp.forward(in[0]); };
  CHECK_GRADCHECK(g, std::vector<Tensor>{leaf(rnd({4, 3}, 9)).transpose(0, 1)});
}

TEST_CASE("transformer: gradcheck of the loss through every parameter") {
  for (bool tie : {false, true}) {
    for (double drop : {0.0, 0.3}) {
      CAPTURE(tie);
      CAPTURE(drop);
      nn::TransformerConfig c = tiny_config();
      c.tie_weights = tie;
      c.attn_dropout = drop;
      nn::Transformer model(c, 7);
      Tensor ids = from_vector(std::vector<int64_t>{1, 5, 3, 9, 0, 2, 2, 10}, {2, 4});
      Tensor targets = from_vector(std::vector<int64_t>{5, 3, 9, -100, 2, 2, 10, 4}, {2, 4});
      std::vector<Tensor> params = model.parameters();
      Fn f = [&](const std::vector<Tensor>&) {
        Generator dropout{11, 0};  // the same masks at every evaluation
        return nn::lm_loss(model.forward(ids, dropout), targets);
      };
      CHECK_GRADCHECK(f, params);
    }
  }
}

TEST_CASE("modules: names, counts, modes, moves") {
  nn::TransformerConfig c = tiny_config();
  nn::Transformer model(c, 1);
  nn::NamedTensors named = model.named_parameters();
  REQUIRE(named.size() == 1 + 2 * 6 + 1 + 1);
  CHECK(named.front().first == "embed.weight");
  CHECK(named[1].first == "blocks.0.attn_norm.weight");
  CHECK(named[2].first == "blocks.0.attn.wqkv.weight");
  CHECK(named[2].second.sizes() == Shape{(2 + 2 * 1) * 4, 8});
  CHECK(named[5].first == "blocks.0.mlp.w13.weight");
  CHECK(named.back().first == "head.weight");
  int64_t want = 11 * 8 + 8 + 11 * 8 + 2 * (8 + 8 * 8 + 4 * 8 + 4 * 8 + 8 * 8 + 8 + 3 * 8 * 12);
  CHECK(model.parameter_count() == want);
  for (auto& [name, p] : named) {
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
  }
  c.tie_weights = true;
  CHECK(nn::Transformer(c, 1).parameter_count() == want - 11 * 8);
  CHECK(model.is_training());
  model.eval();
  CHECK_FALSE(model.is_training());
  model.train();
  model.to(kCPU);  // a no-op on the same device
  CHECK(model.named_parameters().front().second.is_same(named.front().second));
  // Same seed, same weights.
  nn::Transformer again(tiny_config(), 1);
  CHECK(again.parameters()[3].to_vector<double>() == model.parameters()[3].to_vector<double>());
}

TEST_CASE("transformer config and forward: bad input") {
  nn::TransformerConfig c = tiny_config();
  c.kv_heads = 3;
  CHECK_THROWS_WITH_AS(nn::Transformer(c, 0), doctest::Contains("[TransformerConfig]"), tg::Error);
  tgtest::check_throws_with_prefix([&] { c.validate(); }, "[TransformerConfig]",
                                   "must be a multiple of 'kv_heads'");
  c = tiny_config();
  c.d_model = 6;  // head dim 3: odd
  tgtest::check_throws_with_prefix([&] { c.validate(); }, "[TransformerConfig]", "even");
  c = tiny_config();
  c.layers = 0;
  tgtest::check_throws_with_prefix([&] { c.validate(); }, "[TransformerConfig]", "'layers'");
  nn::Transformer model(tiny_config(), 0);
  tgtest::check_throws_with_prefix([&] { model.forward(zeros({2, 3})); }, "[Transformer]", "int64");
  tgtest::check_throws_with_prefix(
      [&] {
        model.forward(full({1, 3}, 11, kInt64));
      },
      "[embedding]", "[0, 11)");
}

TEST_CASE("AdamW: two steps against the update written out by hand") {
  Tensor p = from_vector(std::vector<double>{1.0, -2.0, 0.5}, {3}).requires_grad_(true);
  nn::AdamWOptions o;
  o.lr = 0.1;
  o.beta1 = 0.8;
  o.beta2 = 0.9;
  o.eps = 1e-3;
  o.weight_decay = 0.5;
  nn::AdamW opt({{"p", p}}, o);
  std::vector<double> want = {1.0, -2.0, 0.5}, m(3, 0), v(3, 0);
  const std::vector<std::vector<double>> grads = {{0.3, -0.1, 2.0}, {-0.2, 0.4, 1.0}};
  for (int t = 1; t <= 2; ++t) {
    Tensor c = from_vector(grads[t - 1], {3});
    opt.zero_grad();
    sum(mul(p, c)).backward();  // gradient = c
    opt.step();
    for (int i = 0; i < 3; ++i) {
      const double g = grads[t - 1][i];
      want[i] *= 1 - 0.1 * 0.5;
      m[i] = 0.8 * m[i] + 0.2 * g;
      v[i] = 0.9 * v[i] + 0.1 * g * g;
      const double mh = m[i] / (1 - std::pow(0.8, t)), vh = v[i] / (1 - std::pow(0.9, t));
      want[i] -= 0.1 * mh / (std::sqrt(vh) + 1e-3);
    }
    tgtest::check_close(p.to_vector<double>(), want, 1e-14);
  }
  CHECK(opt.steps() == 2);
  REQUIRE(opt.state().size() == 2);
  CHECK(opt.state()[0].first == "p.exp_avg");
  tgtest::check_close(opt.state()[0].second.to_vector<double>(), m, 1e-15);
  tgtest::check_close(opt.state()[1].second.to_vector<double>(), v, 1e-15);
}

TEST_CASE("SGD with momentum, nesterov and weight decay; clipping; the schedule") {
  for (bool nesterov : {false, true}) {
    Tensor p = from_vector(std::vector<double>{1.0, -1.0}, {2}).requires_grad_(true);
    nn::SGD opt({{"p", p}}, {0.1, 0.9, 0.01, nesterov});
    std::vector<double> want = {1.0, -1.0}, buf = {0, 0};
    for (int t = 0; t < 3; ++t) {
      opt.zero_grad();
      sum(mul(mul(p, p), 0.5)).backward();  // gradient = p
      std::vector<double> cur = p.to_vector<double>();
      opt.step();
      for (int i = 0; i < 2; ++i) {
        const double g = cur[i] + 0.01 * cur[i];
        buf[i] = 0.9 * buf[i] + g;
        want[i] = cur[i] - 0.1 * (nesterov ? g + 0.9 * buf[i] : buf[i]);
      }
      tgtest::check_close(p.to_vector<double>(), want, 1e-14);
    }
  }
  Tensor a = from_vector(std::vector<double>{3.0}, {1}).requires_grad_(true);
  Tensor b = from_vector(std::vector<double>{4.0}, {1}).requires_grad_(true);
  sum(add(a, mul(b, 0.0))).backward();
  sum(mul(b, from_vector(std::vector<double>{4.0}, {1}))).backward();  // grads 1 and 4
  CHECK(nn::clip_grad_norm({a, b}, 100.0) == doctest::Approx(std::sqrt(17.0)));
  CHECK(a.grad().item<double>() == 1.0);  // under the limit: untouched
  CHECK(nn::clip_grad_norm({a, b}, 1.0) == doctest::Approx(std::sqrt(17.0)));
  CHECK(std::hypot(a.grad().item<double>(), b.grad().item<double>()) ==
        doctest::Approx(1.0).epsilon(1e-6));
  tgtest::check_throws_with_prefix([&] { nn::clip_grad_norm({a}, 0); }, "[clip_grad_norm]");

  nn::WarmupCosine s{1.0, 0.1, 10, 110};
  CHECK(s(0) == doctest::Approx(0.1));
  CHECK(s(9) == doctest::Approx(1.0));
  CHECK(s(10) == doctest::Approx(1.0));
  CHECK(s(60) == doctest::Approx(0.55));
  CHECK(s(110) == doctest::Approx(0.1));
  CHECK(s(500) == doctest::Approx(0.1));
}

TEST_CASE("tasks: fixed lengths, correct answers, targets only on the answer, pure in step") {
  for (const std::string& name : nn::task_names()) {
    auto task = nn::make_task(name, 5);
    std::mt19937_64 rng(3);
    for (int i = 0; i < 50; ++i) {
      nn::Example e = task->sample(rng);
      CHECK(static_cast<int64_t>(e.prompt.size()) == task->prompt_len());
      CHECK(static_cast<int64_t>(e.answer.size()) == task->answer_len());
      CHECK(e.prompt.back() == '=');
      const std::string in = e.prompt.substr(0, e.prompt.size() - 1);
      if (name == "reverse") CHECK(e.answer == std::string(in.rbegin(), in.rend()));
      if (name == "sort") {
        std::string s = in;
        std::sort(s.begin(), s.end());
        CHECK(e.answer == s);
      }
      if (name == "add") {
        CHECK(std::stoll(in.substr(0, 5)) + std::stoll(in.substr(6, 5)) == std::stoll(e.answer));
      }
    }
    nn::Batch b = nn::task_batch(*task, 4, 9, 17);
    CHECK(b.inputs.sizes() == Shape{4, task->seq_len()});
    std::vector<int64_t> in = b.inputs.to_vector<int64_t>(), tg = b.targets.to_vector<int64_t>();
    const int64_t t = task->seq_len(), p = task->prompt_len();
    for (int64_t i = 0; i < t; ++i) {
      CHECK((tg[i] == -100) == (i + 1 < p));
      if (i + 1 < t && tg[i] != -100) CHECK(tg[i] == in[i + 1]);
    }
    CHECK(nn::task_batch(*task, 4, 9, 17).inputs.to_vector<int64_t>() == in);
    CHECK(nn::task_batch(*task, 4, 9, 18).inputs.to_vector<int64_t>() != in);
  }
  tgtest::check_throws_with_prefix([] { nn::make_task("copy", 4); }, "[task]",
                                   "unknown task 'copy'");
  tgtest::check_throws_with_prefix([] { nn::make_task("sort", 0); }, "[task]", "'size'");
  CHECK(nn::ByteTokenizer::decode(nn::ByteTokenizer::encode("h\xc3\xa9!")) == "h\xc3\xa9!");
}

TEST_CASE("decoding: greedy equals temperature 0 and top-1 sampling") {
  nn::Transformer model(tiny_config(), 4);
  Generator gen{1, 0};
  nn::SampleOptions o;
  o.max_new_tokens = 5;
  o.temperature = 0;
  std::vector<int64_t> prompt = {1, 2, 3};
  std::vector<int64_t> greedy = nn::sample(model, prompt, o, gen);
  CHECK(greedy.size() == 5);
  o.temperature = 1.5;
  o.top_k = 1;
  CHECK(nn::sample(model, prompt, o, gen) == greedy);
  CHECK(nn::greedy_decode(model, from_vector(prompt, {1, 3}), 5).to_vector<int64_t>() == greedy);
  CHECK(model.is_training());  // decoding restores the mode
  o.top_k = 0;
  std::vector<int64_t> s = nn::sample(model, prompt, o, gen);
  for (int64_t id : s) CHECK((id >= 0 && id < 11));
  tgtest::check_throws_with_prefix([&] { nn::sample(model, {12}, o, gen); }, "[sample]", "outside");
}

TEST_CASE("kernel profiling counts kernels by kind while on") {
  reset_kernel_profile();
  set_kernel_profiling(true);
  matmul(rnd({4, 3}, 1), rnd({3, 2}, 2));
  rms_norm(rnd({2, 4}, 3), Tensor());
  set_kernel_profiling(false);
  matmul(rnd({4, 3}, 1), rnd({3, 2}, 2));  // not counted
  auto prof = kernel_profile();
  CHECK(prof["matmul"].calls == 1);
  CHECK(prof["norm"].calls == 1);
  CHECK(prof["matmul"].ms >= 0);
  reset_kernel_profile();
  CHECK(kernel_profile().empty());
}

TEST_CASE("key/value cache: incremental logits equal the full forward's") {
  for (bool tie : {false, true}) {
    nn::TransformerConfig c = tiny_config();
    c.tie_weights = tie;
    c.attn_dropout = 0.5;  // the cached path never drops
    nn::Transformer model(c, 5);
    model.eval();
    Tensor ids = from_vector(std::vector<int64_t>{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, {2, 6});
    Tensor full = model.forward(ids);
    nn::KVCache cache;
    std::vector<Tensor> parts = {model.forward(ids.slice(1, 0, 3), cache)};  // a 3-token prompt
    CHECK(cache.length() == 3);
    for (int64_t t = 3; t < 6; ++t) parts.push_back(model.forward(ids.slice(1, t, t + 1), cache));
    CHECK(cache.length() == 6);
    tgtest::check_close(cat(parts, 1).to_vector<double>(), full.to_vector<double>(), 1e-12);
    tgtest::check_throws_with_prefix(
        [&] { model.forward(ids.slice(0, 0, 1).slice(1, 0, 1), cache); }, "[Attention]", "batch");
  }
}
