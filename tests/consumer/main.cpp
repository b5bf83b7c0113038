// Built against the installed package by scripts/test.sh: find_package(tapegrad) works, for
// the tensor API and for the model layer (the README's training snippet, a few steps).
#include <tapegrad.h>
#include <cstdio>

int main() {
  tg::Tensor x = tg::arange(4, tg::kFloat64).requires_grad_();
  tg::Tensor y = tg::sum(tg::mul(x, x));
  y.backward();
  double g3 = x.grad().to_vector<double>()[3];
  std::printf("consumer: y = %g, dy/dx[3] = %g\n", y.item<double>(), g3);

  tg::nn::TransformerConfig cfg;
  cfg.d_model = 32;
  tg::nn::Transformer model(cfg, /*seed=*/1);
  tg::nn::AdamW opt(model.named_parameters(), {3e-3});
  tg::nn::WarmupCosine lr{3e-3, 3e-4, /*warmup=*/2, /*total=*/5};
  auto task = tg::nn::make_task("reverse", 4);
  double first = 0, last = 0;
  for (int64_t step = 0; step < 5; ++step) {
    opt.lr = lr(step);
    tg::Generator dropout = tg::nn::step_dropout_generator(1, step);
    last = tg::nn::train_step(model, opt, tg::nn::task_batch(*task, 16, 1, step), dropout);
    if (step == 0) first = last;
  }
  std::printf("consumer: transformer loss %.3f -> %.3f\n", first, last);
  return (y.item<double>() == 14.0 && g3 == 6.0 && last < first) ? 0 : 1;
}
