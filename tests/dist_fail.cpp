// A job whose rank 1 fails, for the dist failure tests: `throw` (an uncaught tg::Error) or
// `hang` (it never reaches the collective, so rank 0's watchdog ends the job after 2 s). Rank 0
// waits in an all_reduce either way. The job must end non-zero with the failure printed once.
#include <tapegrad.h>

#include <chrono>
#include <cstring>
#include <thread>

int main(int argc, char** argv) {
  const bool hang = argc > 1 && std::strcmp(argv[1], "hang") == 0;
  tg::dist::InitOptions o;
  o.timeout_s = hang ? 2 : 60;
  tg::dist::init(o);
  if (tg::dist::rank() == 1) {
    if (hang) std::this_thread::sleep_for(std::chrono::seconds(60));
    throw tg::Error("[test] rank 1 gives up");
  }
  tg::Tensor t = tg::ones({4});
  tg::dist::all_reduce(t);
  return 0;
}
