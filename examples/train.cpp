// The training CLI, tapegrad's main job: trains a RoPE + GQA transformer on a built-in task
// (or a text file), shows progress, evaluates, checkpoints (safetensors), writes the loss
// curve, and ends with exact-match accuracy and a few generated samples.
//
//   train [--task reverse] [--steps N] [--out DIR] [--resume] ...   (train --help lists all)
//   mpirun -np 2 train ...   data-parallel: --batch split over the processes, rank 0 reports
#include <tapegrad.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_checks.h"
#include "stop_signals.h"
#include "train_progress.h"
#include "train_ranks.h"

namespace fs = std::filesystem;
using tg::nn::Metadata;

namespace {

struct Args {
  std::string task = "reverse";
  int64_t task_size = 8;
  bool random_sizes = false;  // task sizes uniform in [1, task_size]
  std::string text;           // a text file instead of a task
  std::string pack = "auto";  // auto (when lengths vary; on the CPU for now), on, off
  int64_t layers = 3, d_model = 64, heads = 4, kv_heads = 2, ffn = 0;
  double dropout = 0.0;
  int64_t steps = 1500, batch = 64, seq_len = 64;
  double lr = 3e-3, min_lr_ratio = 0.1, weight_decay = 0.01, clip = 1.0;
  int64_t warmup = 200;
  uint64_t seed = 1;
  std::string device = "cpu";
  std::string out = "runs/train";
  bool resume = false, overwrite = false;
  std::string precision =
      "fp32";  // fp32, bf16 or fp16 (a checkpoint's when resuming, unless given)
  bool precision_given = false;
  int64_t eval_every = 250, eval_examples = 1000, samples = 5, threads = 0;
};

// Every value, before any work (a negative step count used to train nothing and write an
// untrained checkpoint; a negative rate trained on).
void check_args(const Args& a) {
  for (auto [v, flag] : {std::pair{a.task_size, "--task-size"},
                         {a.layers, "--layers"},
                         {a.d_model, "--d-model"},
                         {a.heads, "--heads"},
                         {a.kv_heads, "--kv-heads"},
                         {a.steps, "--steps"},
                         {a.batch, "--batch"},
                         {a.seq_len, "--seq-len"},
                         {a.eval_examples, "--eval-examples"}}) {
    cli::positive(v, flag);
  }
  for (auto [v, flag] : {std::pair{a.ffn, "--ffn"},
                         {a.warmup, "--warmup"},
                         {a.eval_every, "--eval-every"},
                         {a.samples, "--samples"},
                         {a.threads, "--threads"}}) {
    cli::non_negative(v, flag);
  }
  cli::finite_positive(a.lr, "--lr");
  cli::finite_in(a.weight_decay, "--weight-decay", 0, HUGE_VAL);
  cli::finite_in(a.clip, "--clip", 0, HUGE_VAL);
  cli::finite_in(a.dropout, "--dropout", 0, 1, /*hi_open=*/true);
  if (a.resume && a.overwrite) {
    cli::usage_error("--overwrite", "replaces the run in --out; --resume continues it: pass one");
  }
  if (a.random_sizes && !a.text.empty()) {
    cli::usage_error("--random-sizes", "draws task sizes; it has no meaning with --text");
  }
}

// Packing, when asked or (auto) when the examples' lengths vary: text lines, tasks of random
// sizes. Auto stays padded on CUDA: the ragged CUDA kernels pass the `cuda` label on an H100,
// but there the small models' packed steps are slower than padded ones (0.64x,
// docs/PERFORMANCE.md); --pack on packs there too.
bool packs(const Args& a) {
  if (a.pack != "auto") return a.pack == "on";
  return (!a.text.empty() || a.random_sizes) && a.device == "cpu";
}

// A run already in --out is never replaced silently: --resume continues it, --overwrite
// removes its files first (so that no file of the old run survives beside the new one).
void claim_out_dir(const Args& a) {
  const fs::path out(a.out);
  if (a.resume || !fs::exists(out)) return;
  std::vector<fs::path> found;
  for (const char* name :
       {"model.safetensors", "optimizer.safetensors", "checkpoint.json", "loss.csv", "loss.png"})
    if (fs::exists(out / name)) found.push_back(out / name);
  if (found.empty()) return;
  if (!a.overwrite) {
    cli::usage_error("--out", "'", a.out, "' already holds a run (",
                     found.front().filename().string(),
                     "); pass --resume to continue it or --overwrite to replace it");
  }
  if (tg::dist::rank() == 0) {  // the other ranks only check
    for (const fs::path& f : found) fs::remove(f);
  }
}

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

// Where a run keeps its files.
struct Paths {
  explicit Paths(const std::string& out)
      : model(fs::path(out) / "model.safetensors"),
        optim(fs::path(out) / "optimizer.safetensors"),
        csv(fs::path(out) / "loss.csv"),
        png(fs::path(out) / "loss.png") {}
  fs::path model, optim, csv, png;
};

// What the model learns from: a built-in task, or a text file.
struct Data {
  std::unique_ptr<tg::nn::Task> task;
  std::unique_ptr<tg::nn::TextDataset> text;
  int64_t seq = 0;                        // tokens per sequence (the longest, when they vary)
  bool packed = false;                    // batches of --batch x seq tokens, back to back
  std::string name;                       // for the header
  std::string id;                         // for the checkpoint's metadata
  std::vector<tg::nn::Example> eval_set;  // held-out task examples (none for text)

  // Step's global batch (validation: the text's held-out batch).
  tg::nn::Batch global_batch(const Args& a, int64_t step, bool validation = false) const {
    const int64_t tokens = a.batch * seq;
    if (task) {
      return packed ? tg::nn::task_packed_batch(*task, tokens, a.seed, step)
                    : tg::nn::task_batch(*task, a.batch, a.seed, step);
    }
    return packed ? text->packed_batch(tokens, seq, a.seed, step, validation)
                  : text->batch(a.batch, seq, a.seed, step, validation);
  }
};

Data load_data(const Args& a) {
  Data d;
  d.packed = packs(a);
  if (a.text.empty()) {
    d.task = tg::nn::make_task(a.task, a.task_size, a.random_sizes);
    d.seq = d.task->seq_len();
    const std::string size =
        a.random_sizes ? "1 to " + std::to_string(a.task_size) : std::to_string(a.task_size);
    d.name = d.task->name() + " (size " + size + ")";
    d.id = d.task->name() + ":" + std::to_string(a.task_size) + (a.random_sizes ? ":random" : "");
    d.eval_set = tg::nn::task_eval_set(*d.task, a.eval_examples, a.seed);
  } else {
    d.text = std::make_unique<tg::nn::TextDataset>(a.text);
    d.seq = a.seq_len;
    d.name = d.id = a.text;
    if (d.packed) d.name += " (lines)";
  }
  if (d.packed) d.id += ":packed";  // other batches: a run resumes only with its own packing
  return d;
}

// The model's shape: from the flags, or from the checkpoint when resuming.
tg::nn::TransformerConfig model_config(const Args& a, const Paths& paths) {
  if (a.resume) {
    TG_CHECK(tg::nn::recover_training_checkpoint(a.out), "train", "--resume: no checkpoint in '",
             a.out, "' (expected model.safetensors and optimizer.safetensors)");
    return tg::nn::config_from_json(
        tg::nn::load_safetensors(paths.model.string()).metadata.at("config"));
  }
  return {.vocab = tg::nn::ByteTokenizer::kVocab,
          .d_model = a.d_model,
          .layers = a.layers,
          .heads = a.heads,
          .kv_heads = a.kv_heads,
          .ffn = a.ffn,
          .attn_dropout = a.dropout};
}

void print_header(const Args& a, const Data& data, const tg::nn::TransformerConfig& cfg,
                  const tg::nn::Transformer& model, int64_t first, const std::string& precision) {
  std::printf(
      "tapegrad %s: %s, %lld layers, d_model %lld, heads %lld/%lld (q/kv), ffn %lld, "
      "%lld parameters\n",
      a.resume ? "resuming" : "training", data.name.c_str(), static_cast<long long>(cfg.layers),
      static_cast<long long>(cfg.d_model), static_cast<long long>(cfg.heads),
      static_cast<long long>(cfg.kv_heads), static_cast<long long>(cfg.ffn_size()),
      static_cast<long long>(model.parameter_count()));
  const int world = tg::dist::world_size();
  const std::string procs =
      world > 1 ? std::to_string(world) + " processes (" + tg::dist::backend() + ") x " : "";
  const std::string batch =
      data.packed
          ? "packed batches of " + std::to_string(a.batch * data.seq) + " tokens"
          : "batch " + std::to_string(a.batch) + " x " + std::to_string(data.seq) + " tokens";
  std::printf("steps %lld (from %lld), %s, AdamW lr %.1e, %s%d threads, %s, %s\n",
              static_cast<long long>(a.steps), static_cast<long long>(first), batch.c_str(), a.lr,
              procs.c_str(), tg::get_num_threads(), a.device.c_str(), precision.c_str());
}

// Exact match on the first n held-out task examples, or the validation loss on text.
std::string evaluate(tg::nn::Transformer& model, const Data& data, const Args& a, int64_t n) {
  if (data.task) {
    std::vector<tg::nn::Example> subset(
        data.eval_set.begin(), data.eval_set.begin() + std::min<size_t>(n, data.eval_set.size()));
    auto r = tg::nn::exact_match(model, subset);
    return fmt("exact match %.1f%%", 100 * r.accuracy()) + " (" + std::to_string(r.correct) + "/" +
           std::to_string(r.total) + ")";
  }
  tg::NoGradGuard no_grad;
  model.eval();
  tg::Generator unused{0, 0};  // no dropout in eval mode
  const double loss =
      tg::nn::batch_loss(model, data.global_batch(a, 0, /*validation=*/true), unused)
          .item<double>();
  model.train();
  return fmt("validation loss %.4f", loss);
}

// The precision of the run: autocast dtype and, for float16, the loss scaler (whose state a
// checkpoint keeps so that a resumed run continues bitwise).
struct Precision {
  std::string name = "fp32";
  tg::nn::GradScaler scaler;

  tg::DType dtype() const {
    return name == "bf16" ? tg::kBFloat16 : (name == "fp16" ? tg::kFloat16 : tg::kFloat32);
  }
  tg::nn::GradScaler* loss_scaler() { return name == "fp16" ? &scaler : nullptr; }
};

// Model, optimizer and the loss rows so far, saved as one checkpoint (a crash leaves the
// previous one or this one: models/training_checkpoint.h).
void save_checkpoint(const Args& a, const tg::nn::TransformerConfig& cfg, const Data& data,
                     int64_t step, const tg::nn::Transformer& model, const tg::nn::AdamW& opt,
                     const Precision& precision, const std::vector<std::string>& rows) {
  Metadata meta{{"config", tg::nn::config_to_json(cfg)},
                {"step", std::to_string(step)},
                {"data", data.id},
                {"precision", precision.name},
                {"loss_scale", fmt("%.17g", precision.scaler.current_scale())},
                {"loss_scale_good_steps", std::to_string(precision.scaler.good_steps())}};
  std::string csv = "step,loss,lr\n";
  for (const auto& r : rows) csv += r + "\n";
  tg::nn::save_training_checkpoint(a.out, model, opt, meta, {{"loss.csv", csv}});
}

// For the crash-safety tests: TAPEGRAD_CHECKPOINT_FAULT=<stage>:<n> ends the process with
// status 3 when the n-th checkpoint save reaches <stage> (see save_training_checkpoint).
void install_fault_hook() {
  const char* spec = std::getenv("TAPEGRAD_CHECKPOINT_FAULT");
  if (!spec) return;
  const std::string s(spec);
  const size_t colon = s.find(':');
  const std::string stage = s.substr(0, colon);
  const int nth = colon == std::string::npos ? 1 : std::atoi(s.c_str() + colon + 1);
  tg::nn::set_checkpoint_fault_hook([stage, nth, seen = 0](const std::string& at) mutable {
    if (at == stage && ++seen == nth) std::_Exit(3);
  });
}

// The steps from the optimizer's count to --steps: schedule, step, progress, evaluations and
// checkpoints along the way, and the last checkpoint. Under several processes every rank
// trains its shard of each batch; rank 0 alone reports, evaluates and writes checkpoints.
// Returns 0, or 128 + the signal that stopped the run early (after its checkpoint).
int train(const Args& a, const Data& data, const tg::nn::TransformerConfig& cfg, const Paths& paths,
          tg::nn::Transformer& model, tg::nn::AdamW& opt, int64_t first, Precision& precision) {
  const bool lead = tg::dist::rank() == 0;
  const tg::nn::WarmupCosine schedule{a.lr, a.lr * a.min_lr_ratio, a.warmup, a.steps};
  std::vector<std::string> rows =
      lead ? read_csv_rows(paths.csv, first) : std::vector<std::string>{};
  cli::Progress progress(first, a.steps);
  auto checkpoint = [&](int64_t step) {
    if (lead) save_checkpoint(a, cfg, data, step, model, opt, precision, rows);
  };
  for (int64_t step = first; step < a.steps; ++step) {
    const tg::nn::Batch global = data.global_batch(a, step);
    const tg::nn::Batch b = tg::nn::shard(global, tg::dist::rank(), tg::dist::world_size());
    opt.lr = schedule(step);
    tg::Generator dropout = ranks::dropout_generator(a.seed, step);
    const int64_t skipped = precision.scaler.skipped_steps();
    const ranks::StepOutcome done = ranks::gather_outcome(
        tg::nn::train_step(
            model, opt, b, dropout,
            {.clip = a.clip, .precision = precision.dtype(), .scaler = precision.loss_scaler()}),
        stop::requested_stop());
    if (!lead) {
      if (done.signal && step + 1 < a.steps) return 128 + done.signal;
      continue;
    }
    if (precision.scaler.skipped_steps() > skipped) {
      progress.note("step " + std::to_string(step + 1) +
                    " skipped: its float16 gradients overflowed; loss scale now " +
                    fmt("%g", precision.scaler.current_scale()));
    }
    // Rank 0 alone checks (the loss is the same everywhere): its error ends the job.
    TG_CHECK(std::isfinite(done.loss), "train", "loss became ", done.loss, " at step ", step,
             " (try a lower --lr)");
    rows.push_back(std::to_string(step) + "," + fmt("%.6f", done.loss) + "," + fmt("%.6e", opt.lr));
    progress.update(step, done.loss, opt.lr, global.inputs.numel());
    if (done.signal && step + 1 < a.steps) {
      checkpoint(step + 1);
      progress.note(std::string(done.signal == SIGINT ? "interrupted" : "terminated") +
                    " after step " + std::to_string(step + 1) + ": wrote the checkpoint to '" +
                    a.out + "' (continue with --resume)");
      return 128 + done.signal;
    }
    if (a.eval_every > 0 && (step + 1) % a.eval_every == 0 && step + 1 < a.steps) {
      progress.note("step " + std::to_string(step + 1) + ": loss " + fmt("%.4f", done.loss) + ", " +
                    evaluate(model, data, a, 200));
      checkpoint(step + 1);
      tg::release_free_memory();  // what evaluation and checkpoint freed (docs/PERFORMANCE.md)
    }
  }
  if (!lead) return 0;
  checkpoint(a.steps);
  const bool png = plot_loss(paths.csv, paths.png);
  progress.note(fmt("done in %.1f s", progress.elapsed()) + "; wrote " + paths.model.string() +
                ", " + paths.optim.string() + ", " + paths.csv.string() +
                (png ? ", " + paths.png.string() : " (no gnuplot: no PNG)"));
  return 0;
}

// The final evaluation, then the first task answers against the expected ones, or a sample
// of generated text.
void print_results(const Args& a, const Data& data, tg::nn::Transformer& model) {
  std::printf("final: %s\n", evaluate(model, data, a, a.eval_examples).c_str());
  if (data.task) {
    const std::vector<tg::nn::Example>& set = data.eval_set;
    auto r = tg::nn::exact_match(
        model, std::vector<tg::nn::Example>(set.begin(),
                                            set.begin() + std::min<size_t>(a.samples, set.size())));
    for (size_t i = 0; i < r.predictions.size(); ++i) {
      std::printf("  %s%s   (expected %s) %s\n", set[i].prompt.c_str(), r.predictions[i].c_str(),
                  set[i].answer.c_str(), r.predictions[i] == set[i].answer ? "ok" : "WRONG");
    }
    return;
  }
  tg::Generator gen{a.seed, 0};
  tg::nn::SampleOptions so;
  so.max_new_tokens = 200;
  so.temperature = 0.8;
  so.top_k = 20;
  so.context = data.seq;
  const std::string& text = data.text->text();
  std::string prompt = text.substr(0, std::min<size_t>(16, text.size()));
  auto ids = tg::nn::sample(model, tg::nn::ByteTokenizer::encode(prompt), so, gen);
  std::printf("sample:\n%s%s\n", prompt.c_str(), tg::nn::ByteTokenizer::decode(ids).c_str());
}

// Everything a run trains with, from the flags (and the checkpoint when resuming).
struct Session {
  Data data;
  tg::nn::TransformerConfig cfg;
  std::unique_ptr<tg::nn::Transformer> model;
  std::unique_ptr<tg::nn::AdamW> opt;
  Precision precision;
  int64_t first = 0;  // the step to start from
};

std::unique_ptr<Session> load_session(const Args& a, const Paths& paths) {
  auto s = std::make_unique<Session>();
  s->data = load_data(a);
  s->cfg = model_config(a, paths);
  s->model = std::make_unique<tg::nn::Transformer>(s->cfg, a.seed);
  // Under mpirun each rank of a machine takes a GPU of its own while there are enough (NCCL
  // then carries the gradients); ranks beyond them share, through host memory.
  s->model->to(a.device == "cuda"
                   ? tg::Device(tg::DeviceType::CUDA,
                                tg::dist::local_rank() % std::max(1, tg::cuda_device_count()))
                   : tg::kCPU);
  tg::nn::AdamWOptions ao;
  ao.lr = a.lr;
  ao.weight_decay = a.weight_decay;
  s->opt = std::make_unique<tg::nn::AdamW>(s->model->named_parameters(), ao);
  s->precision.name = a.precision;
  if (a.resume) {
    const Metadata meta = tg::nn::load_training_checkpoint(a.out, *s->model, *s->opt);
    if (meta.count("data") && meta.at("data") != s->data.id) {
      cli::usage_error("--resume", "the run in '", a.out, "' trained on '", meta.at("data"),
                       "', the flags say '", s->data.id,
                       "' (pass the run's --task, --task-size, --random-sizes and --pack, or its "
                       "--text and --pack)");
    }
    s->first = s->opt->steps();
    if (meta.count("step")) s->first = std::stoll(meta.at("step"));  // skipped steps included
    if (meta.count("precision") && !a.precision_given) s->precision.name = meta.at("precision");
    if (meta.count("loss_scale")) {
      s->precision.scaler.set_state(std::stod(meta.at("loss_scale")),
                                    std::stoll(meta.at("loss_scale_good_steps")));
    }
  }
  return s;
}

// Threads per process: --threads, else OMP_NUM_THREADS, else the cores shared among the
// processes this machine runs (mpirun's local size), so that ranks do not oversubscribe it.
void set_threads(const Args& a) {
  if (a.threads > 0) {
    tg::set_num_threads(static_cast<int>(a.threads));
    return;
  }
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (tg::dist::world_size() == 1 || std::getenv("OMP_NUM_THREADS") || !local) return;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  tg::set_num_threads(std::max(1, cores / std::max(1, std::atoi(local))));
}

int run(const Args& a) {
  tg::dist::init();  // every rank under mpirun or srun; else a world of one
  const bool lead = tg::dist::rank() == 0;
  const Paths paths(a.out);
  if (const int failed = ranks::on_every_rank([&] {
        check_args(a);
        const int world = tg::dist::world_size();
        if (a.batch % world != 0 && !packs(a)) {
          cli::usage_error("--batch", a.batch, " sequences do not split over ", world,
                           " processes: pass a multiple of ", world);
        }
        claim_out_dir(a);
        install_fault_hook();
        set_threads(a);
        fs::create_directories(a.out);
        // A save cut short is finished (or undone) by one rank, before any rank reads the run.
        if (a.resume && lead) tg::nn::recover_training_checkpoint(a.out);
      })) {
    return failed;
  }
  std::unique_ptr<Session> s;
  if (const int failed = ranks::on_every_rank([&] { s = load_session(a, paths); })) return failed;
  // From here a rank that fails ends the job (dist::abort): the others may be in a collective.
  try {
    tg::nn::DistributedDataParallel ddp(*s->model);  // gradients averaged over the ranks
    // SIGINT / SIGTERM from here: the first finishes the current step, writes a checkpoint and
    // ends the run with status 128 + the signal (130, 143); a second ends the process at once.
    stop::defer_stop_signals();
    if (lead) {
      print_header(a, s->data, s->cfg, *s->model, s->first, s->precision.name);
      std::fflush(stdout);
    }
    if (const int stopped =
            train(a, s->data, s->cfg, paths, *s->model, *s->opt, s->first, s->precision)) {
      return stopped;
    }
    if (!lead) return 0;
    // The run is saved: a signal now stops the final evaluation at once. One that came during
    // the last step ends the run here, its checkpoint written.
    if (const int sig = stop::end_at_once_on_signals()) return 128 + sig;
    print_results(a, s->data, *s->model);
    return 0;
  } catch (const std::exception& e) {
    if (tg::dist::world_size() == 1) throw;
    tg::dist::abort(std::string("error: ") + e.what(), 1);
  }
}

// The flags, then the run; bad values and library errors end as cli::run says.
int parse_and_run(int argc, char** argv) {
  Args a;
  CLI::App app{"Train a RoPE + grouped-query-attention transformer with tapegrad."};
  app.add_option("--task", a.task, "built-in task: reverse, sort or add")->capture_default_str();
  app.add_option("--task-size", a.task_size, "task length (letters, digits)")
      ->capture_default_str();
  app.add_flag("--random-sizes", a.random_sizes,
               "draw every example's task length uniformly from [1, --task-size]");
  app.add_option("--text", a.text, "train a character-level model on this text file instead")
      ->check(CLI::ExistingFile);
  app.add_option("--layers", a.layers, "transformer blocks")->capture_default_str();
  app.add_option("--d-model", a.d_model, "model width")->capture_default_str();
  app.add_option("--heads", a.heads, "query heads")->capture_default_str();
  app.add_option("--kv-heads", a.kv_heads, "key/value heads (divides --heads)")
      ->capture_default_str();
  app.add_option("--ffn", a.ffn, "SwiGLU hidden size (0: 8/3 d_model)")->capture_default_str();
  app.add_option("--dropout", a.dropout, "attention dropout, in [0, 1)")->capture_default_str();
  app.add_option("--steps", a.steps, "training steps")->capture_default_str();
  app.add_option("--batch", a.batch,
                 "sequences per step (packed: a budget of --batch x the longest sequence tokens)")
      ->capture_default_str();
  app.add_option("--pack", a.pack,
                 "auto: pack sequences back to back when their lengths vary (text lines, "
                 "--random-sizes) on the CPU; on; off: pad (text: random windows)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--seq-len", a.seq_len, "sequence length (text only; packed lines are cut to it)")
      ->capture_default_str();
  app.add_option("--lr", a.lr, "peak learning rate")->capture_default_str();
  app.add_option("--warmup", a.warmup, "linear warmup steps (0: none)")->capture_default_str();
  app.add_option("--weight-decay", a.weight_decay, "AdamW weight decay (0 or more)")
      ->capture_default_str();
  app.add_option("--clip", a.clip, "gradient norm clip (0: off)")->capture_default_str();
  app.add_option("--seed", a.seed, "seed for weights, data and dropout")->capture_default_str();
  app.add_option("--device", a.device, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--out", a.out, "output directory")->capture_default_str();
  app.add_flag("--resume", a.resume, "continue from the checkpoint in --out");
  app.add_flag("--overwrite", a.overwrite,
               "replace the run already in --out (without it, train refuses to)");
  app.add_option("--precision", a.precision,
                 "fp32; bf16 or fp16: mixed precision (autocast, float32 master weights; fp16 "
                 "with loss scaling). Resuming keeps the checkpoint's unless given")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  app.add_option("--eval-every", a.eval_every, "steps between evaluations (0: end only)")
      ->capture_default_str();
  app.add_option("--eval-examples", a.eval_examples, "examples in the final evaluation")
      ->capture_default_str();
  app.add_option("--samples", a.samples, "samples printed at the end (0: none)")
      ->capture_default_str();
  app.add_option("--threads", a.threads, "CPU threads (0: OMP_NUM_THREADS or all)")
      ->capture_default_str();
  return cli::run("train", app, argc, argv, [&] {
    a.precision_given = app.count("--precision") > 0;
    return run(a);
  });
}

}  // namespace

int main(int argc, char** argv) {
  try {
    stop::start_signal_thread();  // before any other thread starts (stop_signals.h says why)
    return parse_and_run(argc, argv);
  } catch (const std::exception& e) {  // the signal thread or the flags themselves failed
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
