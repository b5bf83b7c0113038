// The train CLI's side of running as several processes (mpirun): what the ranks agree on so
// that none waits in a collective for one that gave up or stopped, and what each draws alone.
#pragma once
#include <tapegrad.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli_checks.h"

namespace ranks {

// Each rank's dropout masks: the step's generator with the rank in its key, so that the ranks
// draw different masks (in a world of one, step_dropout_generator's own).
inline tg::Generator dropout_generator(uint64_t seed, int64_t step) {
  tg::Generator g = tg::nn::step_dropout_generator(seed, step);
  g.seed += static_cast<uint64_t>(tg::dist::rank()) * 0x9E3779B97F4A7C15ULL;
  return g;
}

// What the ranks learn after each step, from every rank's loss and stop signal (0: none): the loss
// of the global batch (the mean over the ranks, in rank order, so the same on every rank) and
// whether any rank was told to stop (then all stop after the same step).
struct StepOutcome {
  double loss;
  int signal;
};

inline StepOutcome gather_outcome(double loss, int signal) {
  const int world = tg::dist::world_size();
  if (world == 1) return {loss, signal};
  tg::Tensor mine = tg::from_vector(std::vector<double>{loss, static_cast<double>(signal)}, {2});
  const std::vector<double> all = tg::dist::all_gather(mine).to_vector<double>();
  StepOutcome out{0.0, 0};
  for (int r = 0; r < world; ++r) {
    out.loss += all[2 * r];
    out.signal = std::max(out.signal, static_cast<int>(all[2 * r + 1]));
  }
  out.loss /= world;
  return out;
}

// Runs `part` on every rank. In a world of one its errors propagate as they are. Under several
// processes a failure on any rank fails all of them alike, so that none is left waiting in a
// collective for one that gave up: the lowest failing rank prints its message once and every
// rank returns that rank's status (2 for a usage error, 1 otherwise). Returns 0 when all passed.
template <class F>
int on_every_rank(F&& part) {
  const int world = tg::dist::world_size(), rank = tg::dist::rank();
  if (world == 1) {
    part();
    return 0;
  }
  int64_t status = 0;
  std::string message;
  try {
    part();
  } catch (const cli::UsageError& e) {
    status = 2;
    message = e.what();
  } catch (const std::exception& e) {
    status = 1;
    message = std::string("error: ") + e.what();
  }
  const std::vector<int64_t> all =
      tg::dist::all_gather(tg::from_vector(std::vector<int64_t>{status}, {1})).to_vector<int64_t>();
  for (int r = 0; r < world; ++r) {
    if (all[r] == 0) continue;
    if (r == rank) {
      std::fprintf(stderr, "%s%s\n", rank ? ("[rank " + std::to_string(rank) + "] ").c_str() : "",
                   message.c_str());
    }
    return static_cast<int>(all[r]);
  }
  return 0;
}

}  // namespace ranks
