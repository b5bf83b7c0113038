// Trains a two-layer MLP on a three-arm spiral with the tape and plain SGD + momentum,
// printing the loss as it falls. The project's main job until the transformer lands.
//
//   train_mlp [steps] [seed]
#include <tapegrad.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

// Points on three interleaved spiral arms with a little noise; label = arm.
void make_spiral(int64_t per_class, uint64_t seed, tg::Tensor& x, tg::Tensor& y) {
  const int64_t classes = 3, n = per_class * classes;
  tg::Generator gen{seed, 0};
  std::vector<double> noise = tg::randn({n, 2}, gen, tg::kFloat64).to_vector<double>();
  std::vector<float> xs(n * 2);
  std::vector<int64_t> ys(n);
  for (int64_t c = 0; c < classes; ++c) {
    for (int64_t i = 0; i < per_class; ++i) {
      const int64_t k = c * per_class + i;
      const double r = static_cast<double>(i) / per_class;
      const double t = 4.0 * r + 2.0944 * c;
      xs[2 * k] = static_cast<float>(r * std::sin(t) + 0.02 * noise[2 * k]);
      xs[2 * k + 1] = static_cast<float>(r * std::cos(t) + 0.02 * noise[2 * k + 1]);
      ys[k] = c;
    }
  }
  x = tg::from_vector(xs, {n, 2});
  y = tg::from_vector(ys, {n});
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 600;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0;
  try {
    tg::Tensor x, y;
    make_spiral(200, seed, x, y);
    const int64_t hidden = 64;
    tg::Generator init{seed + 1, 0};
    // He-style initialisation; parameters are leaves that require grad.
    std::vector<tg::Tensor> params = {
        tg::mul(tg::randn({2, hidden}, init), std::sqrt(2.0 / 2)).requires_grad_(),
        tg::zeros({hidden}).requires_grad_(),
        tg::mul(tg::randn({hidden, hidden}, init), std::sqrt(2.0 / hidden)).requires_grad_(),
        tg::zeros({hidden}).requires_grad_(),
        tg::mul(tg::randn({hidden, 3}, init), std::sqrt(1.0 / hidden)).requires_grad_(),
        tg::zeros({3}).requires_grad_()};
    std::vector<tg::Tensor> velocity;
    for (auto& p : params) velocity.push_back(tg::zeros_like(p));
    auto forward = [&](const tg::Tensor& in) {
      tg::Tensor h = tg::gelu(tg::add(tg::matmul(in, params[0]), params[1]));
      h = tg::gelu(tg::add(tg::matmul(h, params[2]), params[3]));
      return tg::add(tg::matmul(h, params[4]), params[5]);
    };
    const double lr = 0.1, momentum = 0.9;
    std::printf("training a 2-%lld-%lld-3 MLP on a 3-arm spiral (%lld points), %d steps\n",
                static_cast<long long>(hidden), static_cast<long long>(hidden),
                static_cast<long long>(x.size(0)), steps);
    float first = 0, last = 0;
    for (int step = 0; step <= steps; ++step) {
      tg::Tensor loss = tg::cross_entropy(forward(x), y);
      loss.backward();
      {
        tg::NoGradGuard no_grad;
        for (size_t i = 0; i < params.size(); ++i) {
          velocity[i].mul_(momentum).add_(params[i].grad());
          params[i].add_(velocity[i], -lr);
          params[i].zero_grad();
        }
      }
      last = loss.item<float>();
      if (step == 0) first = last;
      if (step % 50 == 0) std::printf("step %4d  loss %.4f\n", step, last);
    }
    tg::NoGradGuard no_grad;
    tg::Tensor pred = tg::argmax(forward(x), 1);
    double acc = tg::mean(tg::eq(pred, y).to(tg::kFloat32)).item<float>();
    std::printf("loss %.4f -> %.4f, training accuracy %.1f%%\n", first, last, 100 * acc);
    return last < first ? 0 : 1;
  } catch (const tg::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
