// Built against the installed package by scripts/test.sh: find_package(tapegrad) works.
#include <tapegrad.h>
#include <cstdio>

int main() {
  tg::Tensor x = tg::arange(4, tg::kFloat64).requires_grad_();
  tg::Tensor y = tg::sum(tg::mul(x, x));
  y.backward();
  double g3 = x.grad().to_vector<double>()[3];
  std::printf("consumer: y = %g, dy/dx[3] = %g\n", y.item<double>(), g3);
  return (y.item<double>() == 14.0 && g3 == 6.0) ? 0 : 1;
}
