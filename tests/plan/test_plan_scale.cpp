// Scale: planning a 175B GPT on 1024 H100s enumerates every layout exactly once and picks one that
// fits; the processor time it took is printed (scripts/bench_plan.sh measures it).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>

#include "plan/planner.h"
#include "tests/support/fixture.h"

namespace loom {
namespace {

using namespace plan;

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

TEST(PlanScale, Gpt3_175BOn1024H100s) {
  PlanModel pm;
  pm.model.n_layer = 96, pm.model.n_head = 96, pm.model.d_model = 12288;
  pm.model.seq_len = 2048, pm.model.vocab_size = 50257;
  pm.global_batch = 1536;
  pm.device = "cuda";
  pm.prec = precision_of("bf16");
  const ClusterSpec cl = load_cluster(test::source_path("configs/clusters/h100_80g_8x_128n.yaml"));
  ASSERT_EQ(cl.world(), 1024);

  // Processor time of this (single-threaded) search: the machine's other load does not count.
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  const Plan p = make_plan(pm, cl);
  const double s = double(std::clock() - c0) / CLOCKS_PER_SEC;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // The count, independently: cp up to 4 (2048 tokens in 2*cp chunks of at least 256); grids
  // whose tp divides the heads and width, pp <= layers and dp dividing the batch; per grid v = 1,
  // and with pp > 1 each v of 2..4 with 96 % (pp*v) == 0, every micro-batch size dividing the
  // DP batch (for v > 1: m a multiple of pp), ZeRO 0-3 (0 when dp*cp = 1), recompute none and
  // full (on cuda attention keeps no probabilities: selective would be none), each with and
  // without sequence parallelism when tp > 1 and the micro-batch's 2048/cp token rows split
  // over tp.
  int64_t grids = 0, layouts = 0;
  for (int tp : divisors(1024))
    for (int pp : divisors(1024 / tp))
      for (int cp : divisors(1024 / (tp * pp))) {
        if (cp > 4) continue;
        ++grids;
        const int dp = 1024 / (tp * pp * cp);
        if (96 % tp || 12288 % tp || pp > 96 || 1536 % dp) continue;
        for (int v = 1; v <= (pp > 1 ? 4 : 1); ++v) {
          if (v > 1 && 96 % (pp * v)) continue;
          for (int mb : divisors(1536 / dp)) {
            if (v > 1 && (1536 / (dp * mb)) % pp) continue;
            const bool sp = tp > 1 && int64_t(mb) * (2048 / cp) % tp == 0;
            layouts += (dp * cp > 1 ? 4 : 1) * 2 * (sp ? 2 : 1);
          }
        }
      }
  EXPECT_EQ(p.grids, grids);
  EXPECT_EQ(p.evaluated, layouts);
  ASSERT_FALSE(p.valid.empty());
  const PlanEntry& best = p.valid.front();
  std::printf(
      "175B on 1024 H100: %lld grids, %lld layouts (%zu fit) planned in %.3f s of processor time "
      "(%.3f s wall); best dp %d "
      "pp %d v %d tp %d cp %d mb %d zero %d recompute %s: %.2f s/step, %.0f tokens/s, "
      "MFU %.1f%%, %.1f GiB per GPU\n",
      (long long)p.grids, (long long)p.evaluated, p.valid.size(), s, wall, best.c.dp, best.c.pp,
      best.c.v, best.c.tp, best.c.cp, best.c.micro_batch, best.c.zero,
      recompute_name(best.c.recompute), best.time.total, best.time.tokens_per_s,
      100 * best.time.mfu, double(best.memory.total()) / 1073741824.0);
  EXPECT_LE(best.c.tp, 8);  // TP stays inside a node
  EXPECT_GT(best.time.mfu, 0.2);
  EXPECT_LT(best.time.mfu, cl.efficiency);
  EXPECT_LE(double(best.memory.total()), cl.memory_bytes());
}

}  // namespace
}  // namespace loom
