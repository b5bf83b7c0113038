// The tensor-core SDPA's process-wide settings (cuda_api.h): tg::cuda_sdpa_warp_rows,
// tg::cuda_sdpa_deterministic, tg::cuda_sdpa_deterministic_dq and tg::cuda_sdpa_wgmma, in every
// build (a build without CUDA keeps and checks them, and nothing reads them). Each is -1 until
// set, and then the environment decides, read on every call.
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "backends/cuda_api.h"
#include "core/error.h"

namespace tg {
namespace {

std::atomic<int> g_rows{-1};           // else 0 (automatic), 16 or 32
std::atomic<int> g_deterministic{-1};  // else 0 or 1
std::atomic<int> g_wgmma{-1};          // else an index of kWgmmaModes
std::atomic<int> g_dq{-1};             // else an index of kDqModes

// The environment variable `name`'s value, one of `allowed` (else an error from `op`), or
// `fallback` when it is unset or empty.
std::string from_env(const char* name, std::initializer_list<const char*> allowed,
                     const char* expected, const char* fallback, const char* op) {
  const char* env = std::getenv(name);
  if (!env || !*env) return fallback;
  std::string s = env;
  for (const char* a : allowed)
    if (s == a) return s;
  fail(op, name, ": expected ", expected, ", got \"", s, "\"");
}

// Stores the index of `mode` among `modes` in `set`, else an error from `op`.
template <size_t N>
void set_mode(std::atomic<int>& set, const char* const (&modes)[N], const std::string& mode,
              const char* op, const char* expected) {
  for (size_t i = 0; i < N; ++i)
    if (mode == modes[i]) {
      set.store(static_cast<int>(i));
      return;
    }
  fail(op, "mode: expected ", expected, ", got \"", mode, "\"");
}

}  // namespace

int cuda_sdpa_warp_rows() {
  const int rows = g_rows.load();
  if (rows != -1) return rows;
  return std::stoi(from_env("TAPEGRAD_CUDA_SDPA_WARP_ROWS", {"0", "16", "32"},
                            "\"0\" (automatic), \"16\" or \"32\"", "0", "cuda_sdpa_warp_rows"));
}

void set_cuda_sdpa_warp_rows(int rows) {
  if (rows != 0 && rows != 16 && rows != 32)
    fail("set_cuda_sdpa_warp_rows", "rows: expected 0 (automatic), 16 or 32, got ", rows);
  g_rows.store(rows);
}

bool cuda_sdpa_deterministic() {
  const int set = g_deterministic.load();
  if (set != -1) return set == 1;
  return from_env("TAPEGRAD_CUDA_SDPA_DETERMINISTIC", {"1", "0"}, "\"1\" or \"0\"", "1",
                  "cuda_sdpa_deterministic") == "1";
}

void set_cuda_sdpa_deterministic(bool on) { g_deterministic.store(on ? 1 : 0); }

constexpr const char* kWgmmaModes[] = {"auto", "on", "off"};

std::string cuda_sdpa_wgmma() {
  const int set = g_wgmma.load();
  if (set != -1) return kWgmmaModes[set];
  const std::string env =
      from_env("TAPEGRAD_CUDA_SDPA_WGMMA", {"auto", "on", "off", "1", "0"},
               "\"auto\", \"on\" (or \"1\") or \"off\" (or \"0\")", "auto", "cuda_sdpa_wgmma");
  return env == "1" ? "on" : env == "0" ? "off" : env;
}

void set_cuda_sdpa_wgmma(const std::string& mode) {
  set_mode(g_wgmma, kWgmmaModes, mode, "set_cuda_sdpa_wgmma", "\"auto\", \"on\" or \"off\"");
}

constexpr const char* kDqModes[] = {"auto", "pass", "fixed"};

std::string cuda_sdpa_deterministic_dq() {
  const int set = g_dq.load();
  if (set != -1) return kDqModes[set];
  return from_env("TAPEGRAD_CUDA_SDPA_DETERMINISTIC_DQ", {"auto", "pass", "fixed"},
                  "\"auto\", \"pass\" or \"fixed\"", "auto", "cuda_sdpa_deterministic_dq");
}

void set_cuda_sdpa_deterministic_dq(const std::string& mode) {
  set_mode(g_dq, kDqModes, mode, "set_cuda_sdpa_deterministic_dq",
           "\"auto\", \"pass\" or \"fixed\"");
}

}  // namespace tg
