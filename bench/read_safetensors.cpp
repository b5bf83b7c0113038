// Prints each tensor of a safetensors file as "name dtype [shape] sum", one per line, for
// bench/check_half_safetensors.py to compare files written by Python's safetensors:
//
//   read_safetensors PATH
#include <tapegrad.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: read_safetensors PATH\n");
    return 2;
  }
  try {
    for (const auto& [name, t] : tg::nn::load_safetensors(argv[1]).tensors) {
      const double sum = t.numel() ? tg::sum(t.to(tg::kFloat64)).item<double>() : 0.0;
      std::printf("%s %s %s %.17g\n", name.c_str(), tg::dtype_name(t.dtype()),
                  tg::shape_str(t.sizes()).c_str(), sum);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
