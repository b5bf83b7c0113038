// The training CLI, tapegrad's main job: trains a RoPE + GQA transformer on a built-in task
// (or a text file), shows progress, evaluates, checkpoints (safetensors), writes the loss
// curve, and ends with exact-match accuracy and a few generated samples.
//
//   train [--task reverse] [--steps N] [--out DIR] [--resume] ...   (train --help lists all)
#include <tapegrad.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using tg::nn::Metadata;

namespace {

struct Args {
  std::string task = "reverse";
  int64_t task_size = 8;
  std::string text;  // a text file instead of a task
  int64_t layers = 3, d_model = 64, heads = 4, kv_heads = 2, ffn = 0;
  double dropout = 0.0;
  int64_t steps = 1500, batch = 64, seq_len = 64;
  double lr = 3e-3, min_lr_ratio = 0.1, weight_decay = 0.01, clip = 1.0;
  int64_t warmup = 200;
  uint64_t seed = 1;
  std::string device = "cpu";
  std::string out = "runs/train";
  bool resume = false;
  int64_t eval_every = 250, eval_examples = 1000, samples = 5, threads = 0;
};

// One line per event; on a terminal the progress line is redrawn in place.
class Progress {
 public:
  Progress(int64_t first, int64_t total) : first_(first), total_(total), tty_(isatty(1)) {
    start_ = std::chrono::steady_clock::now();
  }
  void update(int64_t step, double loss, double lr, int64_t tokens) {
    tokens_ += tokens;
    const double secs = elapsed();
    const int64_t done = step + 1 - first_;
    const double eta = done ? secs / done * static_cast<double>(total_ - step - 1) : 0;
    const int width = 24, filled = static_cast<int>(width * (step + 1) / total_);
    char line[256];
    std::snprintf(line, sizeof line,
                  "[%s%s] step %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s  ETA %.0fs",
                  std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                  static_cast<long long>(step) + 1, static_cast<long long>(total_), loss, lr,
                  secs > 0 ? tokens_ / secs : 0.0, eta);
    const int64_t every = std::max<int64_t>(1, total_ / 20);
    if (tty_) {
      std::printf("\r%s\033[K", line);
      std::fflush(stdout);
    } else if ((step + 1) % every == 0 || step + 1 == total_) {
      std::printf("%s\n", line);
    }
  }
  void note(const std::string& msg) {
    if (tty_) std::printf("\r\033[K");
    std::printf("%s\n", msg.c_str());
    std::fflush(stdout);
  }
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  int64_t first_, total_;
  bool tty_;
  double tokens_ = 0;
  std::chrono::steady_clock::time_point start_;
};

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// Rows "step,loss,lr" from an earlier run, kept up to `before` when resuming.
std::vector<std::string> read_csv_rows(const fs::path& path, int64_t before) {
  std::vector<std::string> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (!line.empty() && std::stoll(line) < before) rows.push_back(line);
  }
  return rows;
}

void write_csv(const fs::path& path, const std::vector<std::string>& rows) {
  std::ofstream out(path);
  out << "step,loss,lr\n";
  for (const auto& r : rows) out << r << "\n";
}

// loss.png through gnuplot when it is installed; the CSV is always there.
bool plot_loss(const fs::path& csv, const fs::path& png) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) return false;
  const fs::path script = png.string() + ".gp";
  {
    std::ofstream gp(script);
    gp << "set terminal pngcairo size 900,500\nset output '" << png.string() << "'\n"
       << "set datafile separator ','\nset key off\nset logscale y\nset xlabel 'step'\n"
       << "set ylabel 'training loss'\nset grid\n"
       << "plot '" << csv.string() << "' every ::1 using 1:2 with lines lw 1.5\n";
  }
  const bool ok = std::system(("gnuplot '" + script.string() + "' 2>/dev/null").c_str()) == 0;
  fs::remove(script);
  return ok;
}

int run(const Args& a) {
  if (a.threads > 0) tg::set_num_threads(static_cast<int>(a.threads));
  const tg::Device device = a.device == "cuda" ? tg::kCUDA : tg::kCPU;
  fs::create_directories(a.out);
  const fs::path model_path = fs::path(a.out) / "model.safetensors";
  const fs::path optim_path = fs::path(a.out) / "optimizer.safetensors";
  const fs::path csv_path = fs::path(a.out) / "loss.csv";

  std::unique_ptr<tg::nn::Task> task;
  std::unique_ptr<tg::nn::TextDataset> text;
  if (a.text.empty()) {
    task = tg::nn::make_task(a.task, a.task_size);
  } else {
    text = std::make_unique<tg::nn::TextDataset>(a.text);
  }
  const int64_t seq = task ? task->seq_len() : a.seq_len;

  tg::nn::TransformerConfig cfg;
  cfg.vocab = tg::nn::ByteTokenizer::kVocab;
  cfg.d_model = a.d_model;
  cfg.layers = a.layers;
  cfg.heads = a.heads;
  cfg.kv_heads = a.kv_heads;
  cfg.ffn = a.ffn;
  cfg.attn_dropout = a.dropout;
  if (a.resume) {
    TG_CHECK(fs::exists(model_path) && fs::exists(optim_path), "train",
             "--resume: no checkpoint in '", a.out,
             "' (expected model.safetensors and optimizer.safetensors)");
    cfg = tg::nn::config_from_json(
        tg::nn::load_safetensors(model_path.string()).metadata.at("config"));
  }
  tg::nn::Transformer model(cfg, a.seed);
  model.to(device);
  tg::nn::AdamWOptions ao;
  ao.lr = a.lr;
  ao.weight_decay = a.weight_decay;
  tg::nn::AdamW opt(model.named_parameters(), ao);
  if (a.resume) {
    tg::nn::load_module(model_path.string(), model);
    tg::nn::load_optimizer(optim_path.string(), opt);
  }
  const int64_t first = opt.steps();
  const tg::nn::WarmupCosine schedule{a.lr, a.lr * a.min_lr_ratio, a.warmup, a.steps};

  std::printf(
      "tapegrad %s: %s, %lld layers, d_model %lld, heads %lld/%lld (q/kv), ffn %lld, "
      "%lld parameters\n",
      a.resume ? "resuming" : "training",
      task ? (task->name() + " (size " + std::to_string(a.task_size) + ")").c_str()
           : a.text.c_str(),
      static_cast<long long>(cfg.layers), static_cast<long long>(cfg.d_model),
      static_cast<long long>(cfg.heads), static_cast<long long>(cfg.kv_heads),
      static_cast<long long>(cfg.ffn_size()), static_cast<long long>(model.parameter_count()));
  std::printf("steps %lld (from %lld), batch %lld x %lld tokens, AdamW lr %.1e, %d threads, %s\n",
              static_cast<long long>(a.steps), static_cast<long long>(first),
              static_cast<long long>(a.batch), static_cast<long long>(seq), a.lr,
              tg::get_num_threads(), a.device.c_str());

  std::vector<tg::nn::Example> eval_set;
  if (task) eval_set = tg::nn::task_eval_set(*task, a.eval_examples, a.seed);
  auto evaluate = [&](int64_t n) -> std::string {
    if (task) {
      std::vector<tg::nn::Example> subset(eval_set.begin(),
                                          eval_set.begin() + std::min<size_t>(n, eval_set.size()));
      auto r = tg::nn::exact_match(model, subset);
      return fmt("exact match %.1f%%", 100 * r.accuracy()) + " (" + std::to_string(r.correct) +
             "/" + std::to_string(r.total) + ")";
    }
    tg::NoGradGuard no_grad;
    model.eval();
    auto b = text->batch(a.batch, seq, a.seed, 0, true);
    double loss =
        tg::nn::lm_loss(model.forward(b.inputs.to(device)), b.targets.to(device)).item<double>();
    model.train();
    return fmt("validation loss %.4f", loss);
  };

  std::vector<std::string> rows = read_csv_rows(csv_path, first);
  auto checkpoint = [&](int64_t step) {
    Metadata meta{{"config", tg::nn::config_to_json(cfg)},
                  {"step", std::to_string(step)},
                  {"data", task ? task->name() + ":" + std::to_string(a.task_size) : a.text}};
    tg::nn::save_module(model_path.string(), model, meta);
    tg::nn::save_optimizer(optim_path.string(), opt, meta);
    write_csv(csv_path, rows);
  };

  Progress progress(first, a.steps);
  double loss_value = 0;
  for (int64_t step = first; step < a.steps; ++step) {
    tg::nn::Batch b = task ? tg::nn::task_batch(*task, a.batch, a.seed, step)
                           : text->batch(a.batch, seq, a.seed, step, false);
    opt.lr = schedule(step);
    tg::Generator dropout = tg::nn::step_dropout_generator(a.seed, step);
    loss_value = tg::nn::train_step(model, opt, b, dropout, {a.clip});
    TG_CHECK(std::isfinite(loss_value), "train", "loss became ", loss_value, " at step ", step,
             " (try a lower --lr)");
    rows.push_back(std::to_string(step) + "," + fmt("%.6f", loss_value) + "," +
                   fmt("%.6e", opt.lr));
    progress.update(step, loss_value, opt.lr, a.batch * seq);
    if (a.eval_every > 0 && (step + 1) % a.eval_every == 0 && step + 1 < a.steps) {
      progress.note("step " + std::to_string(step + 1) + ": loss " + fmt("%.4f", loss_value) +
                    ", " + evaluate(200));
      checkpoint(step + 1);
    }
  }
  checkpoint(a.steps);
  const bool png = plot_loss(csv_path, fs::path(a.out) / "loss.png");
  progress.note(fmt("done in %.1f s", progress.elapsed()) + "; wrote " + model_path.string() +
                ", " + optim_path.string() + ", " + csv_path.string() +
                (png ? ", " + (fs::path(a.out) / "loss.png").string() : " (no gnuplot: no PNG)"));

  std::printf("final: %s\n", evaluate(a.eval_examples).c_str());
  if (task) {
    auto r = tg::nn::exact_match(
        model,
        std::vector<tg::nn::Example>(
            eval_set.begin(), eval_set.begin() + std::min<size_t>(a.samples, eval_set.size())));
    for (size_t i = 0; i < r.predictions.size(); ++i) {
      std::printf("  %s%s   (expected %s) %s\n", eval_set[i].prompt.c_str(),
                  r.predictions[i].c_str(), eval_set[i].answer.c_str(),
                  r.predictions[i] == eval_set[i].answer ? "ok" : "WRONG");
    }
  } else {
    tg::Generator gen{a.seed, 0};
    tg::nn::SampleOptions so;
    so.max_new_tokens = 200;
    so.temperature = 0.8;
    so.top_k = 20;
    so.context = seq;
    std::string prompt = text->text().substr(0, std::min<size_t>(16, text->text().size()));
    auto ids = tg::nn::sample(model, tg::nn::ByteTokenizer::encode(prompt), so, gen);
    std::printf("sample:\n%s%s\n", prompt.c_str(), tg::nn::ByteTokenizer::decode(ids).c_str());
  }
  return 0;
}

// Parses the flags and runs; errors of the library come back as tg::Error.
int parse_and_run(int argc, char** argv) {
  Args a;
  CLI::App app{"Train a RoPE + grouped-query-attention transformer with tapegrad."};
  app.add_option("--task", a.task, "built-in task: reverse, sort or add")->capture_default_str();
  app.add_option("--task-size", a.task_size, "task length (letters, digits)")
      ->capture_default_str();
  app.add_option("--text", a.text, "train a character-level model on this text file instead")
      ->check(CLI::ExistingFile);
  app.add_option("--layers", a.layers, "transformer blocks")->capture_default_str();
  app.add_option("--d-model", a.d_model, "model width")->capture_default_str();
  app.add_option("--heads", a.heads, "query heads")->capture_default_str();
  app.add_option("--kv-heads", a.kv_heads, "key/value heads (divides --heads)")
      ->capture_default_str();
  app.add_option("--ffn", a.ffn, "SwiGLU hidden size (0: 8/3 d_model)")->capture_default_str();
  app.add_option("--dropout", a.dropout, "attention dropout")->capture_default_str();
  app.add_option("--steps", a.steps, "training steps")->capture_default_str();
  app.add_option("--batch", a.batch, "sequences per step")->capture_default_str();
  app.add_option("--seq-len", a.seq_len, "sequence length (text only)")->capture_default_str();
  app.add_option("--lr", a.lr, "peak learning rate")->capture_default_str();
  app.add_option("--warmup", a.warmup, "linear warmup steps")->capture_default_str();
  app.add_option("--weight-decay", a.weight_decay, "AdamW weight decay")->capture_default_str();
  app.add_option("--clip", a.clip, "gradient norm clip (0: off)")->capture_default_str();
  app.add_option("--seed", a.seed, "seed for weights, data and dropout")->capture_default_str();
  app.add_option("--device", a.device, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--out", a.out, "output directory")->capture_default_str();
  app.add_flag("--resume", a.resume, "continue from the checkpoint in --out");
  app.add_option("--eval-every", a.eval_every, "steps between evaluations (0: end only)")
      ->capture_default_str();
  app.add_option("--eval-examples", a.eval_examples, "examples in the final evaluation")
      ->capture_default_str();
  app.add_option("--samples", a.samples, "samples printed at the end")->capture_default_str();
  app.add_option("--threads", a.threads, "CPU threads (0: OMP_NUM_THREADS or all)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return run(a);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return parse_and_run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nerror: %s\n", e.what());
    return 1;
  }
}
