// bench_step: times loom's training step for a config and splits it into GEMM / optimizer / other.
#include <cblas.h>
#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/blas_setup.h"
#include "backend/cpu_threads.h"
#include "cli/load_config.h"
#include "core/log.h"
#include "core/timer.h"
#include "kernels/matmul.h"
#include "model/flops.h"
#include "parallel/collective.h"
#include "parallel/parallel_ctx.h"
#include "train/trainer.h"

namespace {

const char* kUsage =
    "usage: bench_step CONFIG.yaml [--set key.path=value]... [--warmup W]\n"
    "  Runs train.steps steps of loom's trainer (under mpirun: every rank); the first W (default "
    "2)\n"
    "  are not timed. Prints one line: median step ms, tokens/s, model GFLOP/s (flops.h formula),\n"
    "  and, per rank (mean over ranks), the GEMM time share and the GEMM GFLOP/s inside the "
    "step.\n";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int run(int argc, char** argv) {
  using namespace loom;
  std::string config;
  std::vector<std::string> sets;
  int warmup = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--set" && i + 1 < argc)
      sets.push_back(argv[++i]);
    else if (a == "--warmup" && i + 1 < argc)
      warmup = std::atoi(argv[++i]);
    else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (config.empty() && a[0] != '-')
      config = a;
    else {
      std::fprintf(stderr, "bench_step: unexpected argument '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (config.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Config cfg = load_and_validate(config, sets, world);
  if (cfg.train.steps <= warmup) {
    std::fprintf(stderr, "bench_step: train.steps (%d) must exceed --warmup (%d)\n",
                 cfg.train.steps, warmup);
    return 2;
  }
  Grid grid(cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.tp, cfg.parallel.order);
  auto pc = make_parallel_ctx(grid);
  const int threads = default_num_threads(pc->local_size);
  configure_cpu_threads(threads);
  std::unique_ptr<Trainer> tr;
  collectively([&] { tr = std::make_unique<Trainer>(cfg, *pc); });
  collectively([&] { tr->init_weights(); });
  std::vector<double> step_ms;
  double gemm_ms = 0, gemm_flops = 0, timed_ms = 0, loss = 0;
  for (int s = 1; s <= cfg.train.steps; ++s) {
    const bool timed = s > warmup;
    cpu::gemm_stats_reset();
    cpu::gemm_stats_enable(timed);
    MPI_Barrier(MPI_COMM_WORLD);
    StepStats st = tr->train_step(s);
    cpu::gemm_stats_enable(false);
    loss = st.loss;
    if (!timed) continue;
    step_ms.push_back(st.step_ms);
    timed_ms += st.step_ms;
    gemm_ms += cpu::gemm_stats().ms;
    gemm_flops += cpu::gemm_stats().flops;
  }
  double v[3] = {gemm_ms, gemm_flops, timed_ms};  // mean over ranks
  MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const double med = median(step_ms);
  // The slowest rank sets the pace: take the max of the per-rank medians.
  double med_max = med;
  MPI_Allreduce(MPI_IN_PLACE, &med_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  // Threads really in use per rank: OpenMP's team size and OpenBLAS's pool (max over ranks).
  int thr[2] = {omp_get_max_threads(), openblas_get_num_threads()};
  MPI_Allreduce(MPI_IN_PLACE, thr, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (pc->rank == 0) {
    const double tokens = double(cfg.train.global_batch_size) * cfg.model.seq_len;
    const double tps = tokens / (med_max / 1000.0);
    const double gflops = flops_per_token(cfg.model) * tps / 1e9;
    std::printf(
        "bench_step world=%d threads_per_rank=%d omp_max=%d openblas=%d steps=%zu "
        "median_step_ms=%.1f tokens_per_s=%.1f "
        "model_gflops=%.1f gemm_share=%.3f gemm_gflops_per_rank=%.1f flops_per_token=%.0f "
        "loss=%.4f\n",
        world, threads, thr[0], thr[1], step_ms.size(), med_max, tps, gflops, v[0] / v[2],
        v[1] / (v[0] * 1e6), flops_per_token(cfg.model), loss);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  loom::ensure_fast_blas(argv);
  MPI_Init(&argc, &argv);
  int code = 0;
  try {
    code = run(argc, argv);
  } catch (const loom::ReportedError& e) {
    code = e.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_step: error: %s\n", e.what());
    code = 1;
  }
  MPI_Finalize();
  return code;
}
