// Training end to end: checkpoints (round trip, resume, corrupt files), determinism, and a
// short run whose loss must fall.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "test_util.h"

using namespace tg;
namespace fs = std::filesystem;

namespace {

nn::TransformerConfig small_config() {
  return {.vocab = 256, .d_model = 32, .layers = 2, .heads = 4, .kv_heads = 2, .attn_dropout = 0.1};
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("tapegrad_test_" + name + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

// A user's own model: two Linear layers around a tanh.
class TinyMlp : public nn::Module {
 public:
  explicit TinyMlp(Generator& gen)
      : l1(register_module("l1", std::make_shared<nn::Linear>(2, 16, true, gen, 0, kFloat64))),
        l2(register_module("l2", std::make_shared<nn::Linear>(16, 1, true, gen, 0, kFloat64))) {}
  Tensor forward(const Tensor& x) const { return l2->forward(tanh(l1->forward(x))); }

 private:
  std::shared_ptr<nn::Linear> l1, l2;
};

// Losses of steps [from, to) of the sort task, continuing model and opt.
std::vector<double> run_steps(nn::Transformer& model, nn::AdamW& opt, const nn::Task& task,
                              int64_t from, int64_t to) {
  std::vector<double> losses;
  nn::WarmupCosine schedule{3e-3, 3e-4, 2, to};
  for (int64_t step = from; step < to; ++step) {
    opt.lr = schedule(step);
    Generator drop = nn::step_dropout_generator(5, step);
    losses.push_back(nn::train_step(model, opt, nn::task_batch(task, 8, 5, step), drop));
  }
  return losses;
}

// A small model and its AdamW as the tests train them, saved to and loaded from a directory.
struct Run {
  explicit Run(uint64_t seed) : model(small_config(), seed), opt(model.named_parameters()) {}
  std::vector<double> steps(const nn::Task& task, int64_t from, int64_t to) {
    return run_steps(model, opt, task, from, to);
  }
  void save(const fs::path& dir, const nn::Metadata& meta = {}) const {
    nn::save_module((dir / "m.safetensors").string(), model, meta);
    nn::save_optimizer((dir / "o.safetensors").string(), opt);
  }
  nn::Metadata load(const fs::path& dir) {
    nn::Metadata meta = nn::load_module((dir / "m.safetensors").string(), model);
    nn::load_optimizer((dir / "o.safetensors").string(), opt);
    return meta;
  }
  nn::Transformer model;
  nn::AdamW opt;
};

void write_bytes(const fs::path& p, const std::vector<char>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

}  // namespace

TEST_CASE("safetensors: round trip of every dtype, metadata, and the layout on disk") {
  fs::path dir = temp_dir("st");
  const std::string path = (dir / "t.safetensors").string();
  nn::NamedTensors ts = {{"a", tgtest::rnd({2, 3}, 1).to(kFloat32)},
                         {"b.c", tgtest::rnd({4}, 2).transpose(0, 0)},
                         {"ids", from_vector(std::vector<int64_t>{-5, 7}, {2, 1})},
                         {"m", from_vector(std::vector<bool>{true, false, true}, {3})},
                         {"empty", zeros({0, 2})},
                         {"h", tgtest::rnd({3}, 3).to(kBFloat16)},
                         {"f16", tgtest::rnd({1, 2}, 4).to(kFloat16)}};
  nn::save_safetensors(path, ts, {{"k", "v"}});
  nn::SafetensorsFile f = nn::load_safetensors(path);
  REQUIRE(f.tensors.size() == ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    CHECK(f.tensors[i].first == ts[i].first);
    CHECK(f.tensors[i].second.sizes() == ts[i].second.sizes());
    CHECK(f.tensors[i].second.dtype() == ts[i].second.dtype());
    CHECK(f.tensors[i].second.to(kFloat64).to_vector<double>() ==
          ts[i].second.to(kFloat64).to_vector<double>());
  }
  CHECK(f.metadata.at("k") == "v");
  std::vector<char> bytes = tgtest::read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  CHECK(bytes.size() == 8 + n + 6 * 4 + 4 * 8 + 2 * 8 + 3 + 3 * 2 + 2 * 2);
  const std::string header(bytes.data() + 8, n);
  CHECK(header.find("\"dtype\":\"F32\"") != std::string::npos);
  CHECK(header.find("\"dtype\":\"BF16\"") != std::string::npos);
  CHECK(header.find("\"dtype\":\"F16\"") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("safetensors: empty tensors anywhere, as tapegrad and Python's library write them") {
  fs::path dir = temp_dir("st_empty");
  const std::string path = (dir / "e.safetensors").string();
  // Empty tensors first, between and last: each at the offset where the data stood.
  nn::NamedTensors ts = {{"z_empty", zeros({0})},
                         {"a_after", ones({2})},
                         {"mid", zeros({3, 0})},
                         {"last", full({1}, 7.0)},
                         {"end", zeros({0, 4})}};
  nn::save_safetensors(path, ts);
  nn::SafetensorsFile f = nn::load_safetensors(path);
  REQUIRE(f.tensors.size() == ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    CAPTURE(ts[i].first);
    CHECK(f.tensors[i].first == ts[i].first);
    CHECK(f.tensors[i].second.sizes() == ts[i].second.sizes());
    CHECK(f.tensors[i].second.to_vector<float>() == ts[i].second.to_vector<float>());
  }
  // Python's safetensors puts the empty 'b' at [0, 0] and 'a' at [0, 8].
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})";
  const float a[2] = {1.5f, -2.0f};
  write_bytes(dir / "py", tgtest::safetensors_bytes(
                              header, std::vector<char>(reinterpret_cast<const char*>(a),
                                                        reinterpret_cast<const char*>(a) + 8)));
  nn::SafetensorsFile py = nn::load_safetensors((dir / "py").string());
  REQUIRE(py.tensors.size() == 2);
  CHECK(py.tensors[0].first == "b");
  CHECK(py.tensors[0].second.numel() == 0);
  CHECK(py.tensors[1].second.to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  // A shape whose byte count overflows 64 bits is refused, not wrapped around to match.
  const std::string huge =
      R"({"h":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})";
  write_bytes(dir / "huge", tgtest::safetensors_bytes(huge));
  tgtest::check_throws_with_prefix([&] { nn::load_safetensors((dir / "huge").string()); },
                                   "[safetensors]", "too large");
  fs::remove_all(dir);
}

TEST_CASE("safetensors: names and metadata that are not UTF-8 are a [safetensors] error") {
  fs::path dir = temp_dir("st_utf8");
  const std::string path = (dir / "u.safetensors").string();
  tgtest::check_throws_with_prefix(
      [&] {
        nn::save_safetensors(path, {{"w", ones({1})}}, {{"note", "caf\xe9"}});
      },
      "[safetensors]", "metadata value 'caf\\xe9' is not valid UTF-8");
  tgtest::check_throws_with_prefix(
      [&] {
        nn::save_safetensors(path, {{"\xc0\xaf", ones({1})}});
      },
      "[safetensors]", "tensor name");
  nn::save_safetensors(path, {{"w\xc3\xa9", ones({1})}},
                       {{"note", "caf\xc3\xa9 \xf0\x9f\x99\x82"}});
  nn::SafetensorsFile f = nn::load_safetensors(path);
  CHECK(f.metadata.at("note") == "caf\xc3\xa9 \xf0\x9f\x99\x82");
  fs::remove_all(dir);
}

TEST_CASE("checkpoints: bitwise round trip of model and optimizer") {
  fs::path dir = temp_dir("rt");
  auto task = nn::make_task("sort", 4);
  Run a(1);
  a.steps(*task, 0, 2);
  a.save(dir, {{"note", "x"}});
  Run b(2);  // other weights
  CHECK(b.load(dir).at("note") == "x");
  auto pa = a.model.parameters(), pb = b.model.parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    CHECK(pa[i].to_vector<float>() == pb[i].to_vector<float>());
  auto sa = a.opt.state(), sb = b.opt.state();
  for (size_t i = 0; i < sa.size(); ++i) {
    CHECK(sa[i].second.to_vector<float>() == sb[i].second.to_vector<float>());
  }
  CHECK(b.opt.steps() == 2);
  fs::remove_all(dir);
}

TEST_CASE("resuming from a checkpoint gives the uninterrupted loss curve, bitwise") {
  fs::path dir = temp_dir("resume");
  auto task = nn::make_task("sort", 4);
  Run full(3);
  std::vector<double> want = full.steps(*task, 0, 6);
  Run first(3);
  std::vector<double> got = first.steps(*task, 0, 3);
  first.save(dir);
  Run second(99);
  second.load(dir);
  std::vector<double> rest = second.steps(*task, second.opt.steps(), 6);
  got.insert(got.end(), rest.begin(), rest.end());
  CHECK(got == want);
  fs::remove_all(dir);
}

TEST_CASE("same seed and threads give bitwise identical losses") {
  auto task = nn::make_task("reverse", 5);
  std::vector<std::vector<double>> runs;
  for (int r = 0; r < 2; ++r) runs.push_back(Run(8).steps(*task, 0, 4));
  CHECK(runs[0] == runs[1]);
  CHECK(Run(9).steps(*task, 0, 4) != runs[0]);  // another seed: other losses
}

TEST_CASE("training checkpoints: one unit; a model and an optimizer of two saves are refused") {
  fs::path a = temp_dir("tc_a"), b = temp_dir("tc_b");
  auto task = nn::make_task("sort", 4);
  Run run(4);
  run.steps(*task, 0, 1);
  nn::save_training_checkpoint(a.string(), run.model, run.opt, {{"step", "1"}}, {{"log", "x\n"}});
  run.steps(*task, 1, 2);
  nn::save_training_checkpoint(b.string(), run.model, run.opt, {{"step", "2"}});
  CHECK(!fs::exists(a / "log.next"));
  std::ifstream log(a / "log");
  std::string line;
  std::getline(log, line);
  CHECK(line == "x");
  Run other(5);
  CHECK(nn::load_training_checkpoint(b.string(), other.model, other.opt).at("step") == "2");
  CHECK(other.opt.steps() == 2);
  // b's optimizer beside a's model: not one checkpoint, and nothing is loaded.
  fs::copy_file(b / "optimizer.safetensors", a / "optimizer.safetensors",
                fs::copy_options::overwrite_existing);
  Run fresh(6);
  const std::vector<float> before = fresh.model.parameters()[0].to_vector<float>();
  tgtest::check_throws_with_prefix(
      [&] { nn::load_training_checkpoint(a.string(), fresh.model, fresh.opt); }, "[checkpoint]",
      "are not one checkpoint");
  CHECK(fresh.model.parameters()[0].to_vector<float>() == before);
  tgtest::check_throws_with_prefix(
      [&] { nn::load_training_checkpoint((a / "none").string(), fresh.model, fresh.opt); },
      "[checkpoint]", "no checkpoint in");
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST_CASE("checkpoints: missing, truncated, corrupt or foreign files are refused") {
  fs::path dir = temp_dir("bad");
  const fs::path good = dir / "m.safetensors";
  nn::Transformer model(small_config(), 1);
  nn::save_module(good.string(), model);
  std::vector<char> bytes = tgtest::read_bytes(good);

  tgtest::check_throws_with_prefix([&] { nn::load_module((dir / "nope").string(), model); },
                                   "[safetensors]", "no such file");
  write_bytes(dir / "short", std::vector<char>(bytes.begin(), bytes.begin() + 5));
  tgtest::check_throws_with_prefix([&] { nn::load_module((dir / "short").string(), model); },
                                   "[safetensors]", "too short");
  write_bytes(dir / "cut", std::vector<char>(bytes.begin(), bytes.end() - 100));
  tgtest::check_throws_with_prefix([&] { nn::load_module((dir / "cut").string(), model); },
                                   "[safetensors]", "outside");
  write_bytes(dir / "cuthead", std::vector<char>(bytes.begin(), bytes.begin() + 40));
  tgtest::check_throws_with_prefix([&] { nn::load_module((dir / "cuthead").string(), model); },
                                   "[safetensors]", "truncated");
  std::vector<char> garbled = bytes;
  garbled[8] = '[';
  garbled[9] = '!';
  write_bytes(dir / "garbled", garbled);
  tgtest::check_throws_with_prefix([&] { nn::load_module((dir / "garbled").string(), model); },
                                   "[safetensors]", "not valid JSON");
  std::vector<char> longer = bytes;
  longer.push_back(0);
  write_bytes(dir / "longer", longer);
  tgtest::check_throws_with_prefix([&] { nn::load_module((dir / "longer").string(), model); },
                                   "[safetensors]", "cover");

  nn::TransformerConfig other = small_config();
  other.d_model = 48;
  nn::Transformer wide(other, 1);
  tgtest::check_throws_with_prefix([&] { nn::load_module(good.string(), wide); }, "[checkpoint]",
                                   "the model expects [256, 48]");
  other = small_config();
  other.layers = 3;
  nn::Transformer deep(other, 1);
  tgtest::check_throws_with_prefix([&] { nn::load_module(good.string(), deep); }, "[checkpoint]",
                                   "blocks.2");
  other = small_config();
  other.dtype = kFloat64;
  nn::Transformer dbl(other, 1);
  tgtest::check_throws_with_prefix([&] { nn::load_module(good.string(), dbl); }, "[checkpoint]",
                                   "dtype");
  nn::AdamW opt(model.named_parameters());
  tgtest::check_throws_with_prefix([&] { nn::load_optimizer(good.string(), opt); }, "[checkpoint]",
                                   "steps");
  tgtest::check_throws_with_prefix([] { nn::config_from_json("{\"vocab\": 1}"); }, "[checkpoint]",
                                   "config");
  fs::remove_all(dir);
}

TEST_CASE("training on the sort task: the loss falls") {
  auto task = nn::make_task("sort", 5);
  nn::TransformerConfig c = small_config();
  c.attn_dropout = 0;
  nn::Transformer model(c, 4);
  nn::AdamW opt(model.named_parameters());
  nn::WarmupCosine schedule{1e-2, 1e-3, 10, 150};
  double first = 0, last = 0;
  for (int64_t step = 0; step < 150; ++step) {
    opt.lr = schedule(step);
    Generator drop = nn::step_dropout_generator(1, step);
    last = nn::train_step(model, opt, nn::task_batch(*task, 32, 1, step), drop);
    if (step == 0) first = last;
  }
  INFO("first loss " << first << ", last " << last);
  CHECK(first > 4.0);  // about log(256) at the start
  CHECK(last < 1.0);
  auto r = nn::exact_match(model, nn::task_eval_set(*task, 100, 1));
  CHECK(r.accuracy() > 0.2);
}

TEST_CASE("text dataset: next-byte targets, a held-out split, and its errors") {
  fs::path dir = temp_dir("text");
  std::string text;
  for (int i = 0; i < 200; ++i) text += static_cast<char>('a' + i % 26);
  write_bytes(dir / "t.txt", std::vector<char>(text.begin(), text.end()));
  nn::TextDataset data((dir / "t.txt").string());
  CHECK(data.text() == text);
  for (bool validation : {false, true}) {
    nn::Batch b = data.batch(3, 8, 1, 4, validation);
    CHECK(b.inputs.sizes() == Shape{3, 8});
    std::vector<int64_t> in = b.inputs.to_vector<int64_t>(), tg = b.targets.to_vector<int64_t>();
    for (size_t i = 0; i < in.size(); ++i) CHECK(tg[i] == 'a' + (in[i] - 'a' + 1) % 26);
  }
  CHECK(data.batch(3, 8, 1, 4, false).inputs.to_vector<int64_t>() ==
        data.batch(3, 8, 1, 4, false).inputs.to_vector<int64_t>());
  tgtest::check_throws_with_prefix([&] { data.batch(2, 30, 1, 0, true); }, "[text]",
                                   "bytes of validation text");
  tgtest::check_throws_with_prefix([&] { nn::TextDataset((dir / "none.txt").string()); }, "[text]",
                                   "cannot open");
  fs::remove_all(dir);
}

TEST_CASE("train_step trains a user's own module with a user's loss") {
  Generator gen{7, 0};
  TinyMlp mlp(gen);
  nn::AdamWOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0;
  nn::AdamW opt(mlp.named_parameters(), o);
  Tensor x = tgtest::rnd({64, 2}, 3), y = sum(mul(x, x), {1}, true);  // learn |x|^2
  auto mse = [&] {
    Tensor d = sub(mlp.forward(x), y);
    return mean(mul(d, d));
  };
  const double first = nn::train_step(mlp, opt, mse);
  double last = first;
  for (int step = 1; step < 300; ++step) last = nn::train_step(mlp, opt, mse);
  CHECK(last < 0.05 * first);
  tgtest::check_throws_with_prefix(
      [&] { nn::train_step(mlp, opt, [&] { return mlp.forward(x); }); }, "[train_step]",
      "one-element tensor, got [64, 1]");
}

TEST_CASE("mixed precision: the sort task trains under bf16 and fp16 autocast") {
  auto task = nn::make_task("sort", 5);
  for (DType low : {kBFloat16, kFloat16}) {
    CAPTURE(low);
    nn::TransformerConfig c = small_config();
    c.attn_dropout = 0;
    nn::Transformer model(c, 4);
    nn::AdamW opt(model.named_parameters());
    nn::GradScaler scaler;
    nn::WarmupCosine schedule{1e-2, 1e-3, 10, 100};
    double first = 0, last = 0;
    for (int64_t step = 0; step < 100; ++step) {
      opt.lr = schedule(step);
      Generator drop = nn::step_dropout_generator(1, step);
      last = nn::train_step(model, opt, nn::task_batch(*task, 32, 1, step), drop,
                            {.precision = low, .scaler = low == kFloat16 ? &scaler : nullptr});
      if (step == 0) first = last;
    }
    INFO("first loss " << first << ", last " << last);
    CHECK(first > 4.0);
    CHECK(last < 1.5);
    for (const Tensor& p : model.parameters()) CHECK(p.dtype() == kFloat32);  // master weights
    CHECK(scaler.skipped_steps() == 0);
  }
}

TEST_CASE("GradScaler: scales, unscales, skips a step whose gradients overflow, adapts") {
  nn::GradScaler s(
      {.init_scale = 8, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 2});
  CHECK(s.scale(full({}, 3.0)).item<double>() == 24.0);
  Tensor p = zeros({2}).requires_grad_();
  sum(mul(p, full({2}, 16.0))).backward();
  CHECK(s.unscale({p}));
  CHECK(p.grad().to_vector<float>() == std::vector<float>{2, 2});
  s.update(false);
  s.update(false);
  CHECK(s.current_scale() == 16);  // two good steps in a row: grown
  p.zero_grad();
  sum(mul(p, full({2}, INFINITY))).backward();
  CHECK_FALSE(s.unscale({p}));
  s.update(true);
  CHECK(s.current_scale() == 8);
  CHECK(s.skipped_steps() == 1);
  CHECK(s.good_steps() == 0);
  // In train_step: a scale that overflows float16 gradients skips the update.
  nn::Transformer model(small_config(), 3);
  nn::AdamW opt(model.named_parameters());
  nn::GradScaler huge({.init_scale = 0x1p60});
  const std::vector<float> before = model.parameters()[0].to_vector<float>();
  auto task = nn::make_task("sort", 5);
  Generator drop = nn::step_dropout_generator(1, 0);
  nn::train_step(model, opt, nn::task_batch(*task, 4, 1, 0), drop,
                 {.precision = kFloat16, .scaler = &huge});
  CHECK(huge.skipped_steps() == 1);
  CHECK(huge.current_scale() == 0x1p59);
  CHECK(opt.steps() == 0);
  CHECK(model.parameters()[0].to_vector<float>() == before);
  tgtest::check_throws_with_prefix([] { nn::GradScaler bad({.init_scale = 0}); }, "[GradScaler]",
                                   "init_scale");
}
