// The benchmarks' command lines: positional words (`bench_x [threads] ... [device]`), where
// `--device NAME` or `--device=NAME` may stand anywhere in place of the device word, and a
// main that reports an error as one line and exit status 1 instead of an abort.
#pragma once

#include <tapegrad.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

namespace bench {

// The first line every benchmark prints: where it ran. The CPU model and the widest vector
// instructions it has (read at run time), the instruction set the CPU kernels were compiled
// for, the thread count and the GEMM library (with ", bf16 native" where bfloat16 products
// multiply in bfloat16, and ", 16-bit SDPA on AMX" where cpu_sdpa_amx() holds), tab-separated
// after the word "machine" (the compare_*.py scripts print it above their tables).
inline void print_machine() {
  const char* cpu_has = __builtin_cpu_supports("avx512f") ? "AVX-512"
                        : __builtin_cpu_supports("avx2")  ? "AVX2"
                                                          : "no AVX2";
  std::printf("machine\tCPU %s (%s)\tkernels %s\t%d threads\tGEMM %s%s%s\n",
              tg::cpu_model().c_str(), cpu_has, tg::cpu_isa(), tg::get_num_threads(),
              tg::cpu_gemm().c_str(), tg::cpu_gemm_bf16_native() ? ", bf16 native" : "",
              tg::cpu_sdpa_amx() ? ", 16-bit SDPA on AMX" : "");
  std::fflush(stdout);
}

struct Args {
  std::string program;
  std::vector<std::string> words;  // the positional words before the device word
  std::string device;              // "cpu" where none is given
  std::string precision = "fp32";  // --precision fp32|bf16|fp16 (the benchmarks that train)

  tg::DType precision_dtype() const {
    return precision == "bf16" ? tg::kBFloat16
                               : (precision == "fp16" ? tg::kFloat16 : tg::kFloat32);
  }

  // Positional word `i` (called `what` in errors) as a non-negative int, or `fallback` where
  // there is none.
  int number(size_t i, const char* what, int fallback) const {
    if (i >= words.size()) return fallback;
    const std::string& w = words[i];
    if (w.empty() || w.size() > 9 || w.find_first_not_of("0123456789") != std::string::npos)
      throw tg::Error("[" + program + "] " + what + ": expected a non-negative number, got '" + w +
                      "'");
    return std::atoi(w.c_str());
  }
};

// Parses argv; `device_pos` is the position of the device word among the positional ones,
// `devices` the words it may be.
inline Args parse_args(const std::string& program, int argc, char** argv, size_t device_pos,
                       const std::vector<std::string>& devices) {
  Args a;
  a.program = program;
  std::string flag;
  for (int i = 1; i < argc; ++i) {
    const std::string w = argv[i];
    if (w == "--device" && i + 1 < argc) {
      flag = argv[++i];
    } else if (w.rfind("--device=", 0) == 0) {
      flag = w.substr(9);
    } else if (w == "--precision" && i + 1 < argc) {
      a.precision = argv[++i];
      if (a.precision != "fp32" && a.precision != "bf16" && a.precision != "fp16")
        throw tg::Error("[" + program + "] precision: expected fp32, bf16 or fp16, got '" +
                        a.precision + "'");
    } else if (w.rfind("--", 0) == 0) {
      throw tg::Error("[" + program + "] option: expected --device NAME or --precision P, got '" +
                      w + "'" + (w == "--device" ? " without a name" : ""));
    } else {
      a.words.push_back(w);
    }
  }
  if (a.words.size() > device_pos + 1)
    throw tg::Error("[" + program + "] arguments: expected at most " +
                    std::to_string(device_pos + 1) + " words, got " +
                    std::to_string(a.words.size()));
  if (a.words.size() == device_pos + 1) {
    if (!flag.empty() && flag != a.words.back())
      throw tg::Error("[" + program + "] device: given twice, as '" + a.words.back() +
                      "' and --device " + flag);
    flag = a.words.back();
    a.words.pop_back();
  }
  a.device = flag.empty() ? "cpu" : flag;
  std::string list;
  bool known = false;
  for (const std::string& d : devices) {
    known = known || d == a.device;
    list += (list.empty() ? "" : ", ") + d;
  }
  if (!known)
    throw tg::Error("[" + program + "] device: expected one of " + list + ", got '" + a.device +
                    "'");
  return a;
}

// Runs body(), printing a thrown error (no CUDA device, a bad argument) as one line.
template <class F>
int guarded_main(F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

}  // namespace bench
