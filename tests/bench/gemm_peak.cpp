// bench_gemm_peak: the machine's measured fp32 GEMM peak (large square OpenBLAS sgemm), GFLOP/s.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "backend/blas_setup.h"
#include "backend/cpu_threads.h"
#include "core/timer.h"
#include "kernels/matmul.h"

namespace {

const char* kUsage =
    "usage: bench_gemm_peak [--threads N] [--size S] [--reps R]\n"
    "  Times R row-major sgemm C(S,S) = A(S,S) B(S,S) through OpenBLAS on N threads (default:\n"
    "  OMP_NUM_THREADS or all cores) for S = 1024, 2048 and 4096 (or the given S) and prints the\n"
    "  best and median GFLOP/s of each size and the best overall (the measured peak).\n";

}  // namespace

// Best and median GFLOP/s of `reps` timed (S, S) x (S, S) sgemms after one warm-up call.
std::pair<double, double> time_size(int S, int reps) {
  const size_t n = size_t(S) * S;
  std::vector<float> A(n), B(n), C(n);  // (S, S) each
  for (size_t i = 0; i < n; ++i) {
    A[i] = float((i * 7919) % 1000) * 1e-3f - 0.5f;
    B[i] = float((i * 104729) % 1000) * 1e-3f - 0.5f;
  }
  loom::cpu::gemm(false, false, S, S, S, 1.0f, A.data(), S, B.data(), S, 0.0f, C.data(), S);
  std::vector<double> gf;
  for (int r = 0; r < reps; ++r) {
    loom::Stopwatch sw;
    loom::cpu::gemm(false, false, S, S, S, 1.0f, A.data(), S, B.data(), S, 0.0f, C.data(), S);
    gf.push_back(2.0 * S * double(S) * S / (sw.ms() * 1e6));
  }
  std::sort(gf.begin(), gf.end());
  return {gf.back(), gf[gf.size() / 2]};
}

int main(int argc, char** argv) {
  loom::ensure_fast_blas(argv);  // same kernels as loom (re-execs with OPENBLAS_CORETYPE)
  int threads = loom::default_num_threads(1), size = 0, reps = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--threads")
      threads = next();
    else if (a == "--size")
      size = next();
    else if (a == "--reps")
      reps = next();
    else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "bench_gemm_peak: unknown option '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (threads < 1 || (size != 0 && size < 64) || reps < 1) {
    std::fprintf(stderr, "bench_gemm_peak: need --threads >= 1, --size >= 64, --reps >= 1\n");
    return 2;
  }
  loom::configure_cpu_threads(threads);
  std::vector<int> sizes = size ? std::vector<int>{size} : std::vector<int>{1024, 2048, 4096};
  double best = 0;
  for (int S : sizes) {
    auto [b, med] = time_size(S, reps);
    std::printf("gemm_peak threads=%d size=%d reps=%d best_gflops=%.1f median_gflops=%.1f\n",
                threads, S, reps, b, med);
    best = std::max(best, b);
  }
  std::printf("gemm_peak threads=%d core=%s peak_gflops=%.1f\n", threads, loom::blas_core_name(),
              best);
  return 0;
}
