// Writes a safetensors file of bfloat16, float16 and float32 tensors with known values (and
// empty tensors first, between and last), for
// bench/check_half_safetensors.py to read with Python's safetensors and PyTorch:
//
//   write_half_checkpoint PATH
#include <tapegrad.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_half_checkpoint PATH\n");
    return 2;
  }
  try {
    // -8, -7.63, ... and values past float16's range and below its normal range.
    const tg::Tensor x = tg::arange(-8.0, 8.0, 0.37, tg::kFloat64);
    const tg::Tensor edge =
        tg::from_vector(std::vector<double>{65504.0, 70000.0, 1e-6, -3e-8, 1.0 / 3.0}, {5});
    tg::nn::save_safetensors(argv[1],
                             {{"empty_first", tg::zeros({0})},
                              {"bf16", x.to(tg::kBFloat16)},
                              {"empty_mid", tg::zeros({2, 0}, tg::kBFloat16)},
                              {"f16", x.to(tg::kFloat16).reshape({2, -1})},
                              {"f32", x.to(tg::kFloat32)},
                              {"edge_bf16", edge.to(tg::kBFloat16)},
                              {"edge_f16", edge.to(tg::kFloat16)},
                              {"empty_last", tg::zeros({0, 3}, tg::kInt64)}},
                             {{"writer", "tapegrad"}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
