// The CUDA suites' main: without a device it exits 77, which ctest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cstdio>

#include "test_util.h"

int main(int argc, char** argv) {
  if (!tg::cuda_is_available()) {
    std::printf("no CUDA device: the CUDA parity suite is skipped\n");
    return 77;  // ctest SKIP_RETURN_CODE
  }
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
