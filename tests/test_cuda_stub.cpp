// Without a CUDA device (or without CUDA in the build) CUDA requests fail cleanly.
#include "test_util.h"

using namespace tg;

TEST_CASE("CUDA requests fail with a clear error when no device is usable") {
  if (cuda_is_available()) {
    MESSAGE("a CUDA device is present: its tests belong to the CUDA backend suite");
    return;
  }
  tgtest::check_throws_with_prefix([] { zeros({3}, TensorOptions().device(kCUDA)); }, "[");
  try {
    zeros({3}, TensorOptions().device(kCUDA));
  } catch (const Error& e) {
    std::string m = e.what();
    INFO(m);
    CHECK(m.find("CUDA") != std::string::npos);
  }
}
