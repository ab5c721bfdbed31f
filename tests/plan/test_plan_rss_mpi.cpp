// Peak RSS of real training steps (2 ranks, cpu) within 10% of the plan's memory total.
#include <gtest/gtest.h>
#include <malloc.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/process.h"
#include "model/flops.h"
#include "parallel/parallel_ctx.h"
#include "plan/memory_model.h"
#include "tests/parallel/equivalence_util.h"
#include "tests/plan/plan_test_util.h"
#include "tests/support/mpi_test_env.h"
#include "train/trainer.h"

namespace loom {
namespace {

constexpr double kTolerance = 0.10;

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return bool(f);
}

// Method. Baseline: once a warm-up run of a tiny model (MPI shared memory, OpenBLAS, OpenMP set
// up) is torn down, the RSS is that of an "empty" loom process (about 23 MiB per rank here).
// Per layout the peak is reset (/proc/self/clear_refs 5) after the model is built and
// initialized (init_weights briefly holds an extra fp32 copy of the stage's parameters: that
// start-up peak is printed, not asserted), one train_step runs, and peak_rss_bytes() minus the
// baseline must be within 10% of the model's total.
// Large buffers are mmap'ed and unmapped when freed (a fixed threshold turns off glibc's
// dynamic one), so one layout's freed buffers never linger in the next one's RSS.
uint64_t baseline_rss() {
  static uint64_t base = [] {
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    Config c = test::tiny_parallel_config();
    c.parallel.dp = test::world_size();
    c.train.steps = 1;
    test::run_layout(c, MPI_COMM_WORLD);  // warm-up: libraries, MPI, threads; then freed
    MPI_Barrier(MPI_COMM_WORLD);
    malloc_trim(0);
    return test::current_rss_bytes();
  }();
  return base;
}

// A model whose memory is large next to the baseline but cheap to step: a wide vocabulary
// (big embedding, head logits) over 2 thin layers.
Config heavy_config(int dp, int pp, int tp, int micro, int zero) {
  Config c = test::tiny_parallel_config();
  c.model.n_layer = 2, c.model.n_head = 4, c.model.d_model = 128;
  c.model.vocab_size = 50257, c.model.seq_len = 64;
  c.parallel.dp = dp, c.parallel.pp = pp, c.parallel.tp = tp;
  c.parallel.micro_batch_size = micro;
  c.optimizer.zero_stage = zero;
  c.train.global_batch_size = dp * micro;
  c.train.steps = 1;
  return c;
}

void check(const Config& cfg) {
#ifdef LOOM_SANITIZE
  GTEST_SKIP() << "under AddressSanitizer the RSS also holds its shadow memory, redzones and "
                  "quarantine of freed blocks, which the plan does not model";
#endif
  const uint64_t base = baseline_rss();
  Grid grid(cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.tp, cfg.parallel.order);
  auto pc = make_parallel_ctx(grid, MPI_COMM_WORLD);
  malloc_trim(0);
  const uint64_t before = test::current_rss_bytes();  // this layout's start: about `base`
  if (!reset_peak_rss()) GTEST_SKIP() << "cannot reset the peak RSS (/proc/self/clear_refs)";
  uint64_t model_total = 0, peak = 0, init_peak = 0;
  {
    Trainer trainer(cfg, *pc, test::synthetic_samples(cfg.model.vocab_size, cfg.model.seq_len));
    trainer.init_weights();
    init_peak = peak_rss_bytes();
    reset_peak_rss();
    trainer.train_step(1);
    peak = peak_rss_bytes();
    const plan::PlanModel pm = plan::plan_model(cfg, test::cpu_cluster());
    const auto shapes = plan::stage_shapes(cfg.model, cfg.parallel.tp, cfg.parallel.pp);
    const int m = cfg.train.global_batch_size / (cfg.parallel.dp * cfg.parallel.micro_batch_size);
    model_total = plan::stage_memory(pm, test::candidate_of(cfg), shapes[size_t(pc->coord.pp)], m,
                                     0, pc->coord.dp)
                      .total();
  }
  const double used = double(peak) - double(base);
  const double err = (used - double(model_total)) / double(model_total);
  const double mib = 1048576.0;
  std::printf(
      "rank %d %-32s empty process %.1f MiB (before this layout %.1f) | model %.1f MiB | "
      "step peak %.1f MiB: %.1f above the empty process (%+.1f%%) | start-up peak %.1f "
      "above\n",
      test::world_rank(), test::layout_name(cfg).c_str(), base / mib, before / mib,
      model_total / mib, peak / mib, used / mib, 100 * err,
      (double(init_peak) - double(base)) / mib);
  // The model must be large against the page-level noise of RSS (a few MiB); the empty
  // process itself (100+ MiB of libraries in CUDA builds) cancels out in peak - base.
  EXPECT_GT(double(model_total), 64.0 * mib) << "the model must dominate the measurement noise";
  EXPECT_LT(std::abs(err), kTolerance) << test::layout_name(cfg);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(PlanRss, DataParallelZero0) { check(heavy_config(2, 1, 1, 8, 0)); }
TEST(PlanRss, DataParallelZero2) { check(heavy_config(2, 1, 1, 8, 2)); }
TEST(PlanRss, TensorParallel) { check(heavy_config(1, 1, 2, 8, 0)); }

}  // namespace
}  // namespace loom
