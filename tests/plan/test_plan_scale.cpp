// Scale: planning a 175B GPT on 1024 H100s enumerates every layout in well under 10 s.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

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
  const ClusterSpec cl =
      load_cluster(test::source_path("configs/clusters/h100_80g_8x_128n.yaml"));
  ASSERT_EQ(cl.world(), 1024);

  const auto t0 = std::chrono::steady_clock::now();
  const Plan p = make_plan(pm, cl);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // The count, independently: grids whose tp divides the heads and width, pp <= layers and dp
  // dividing the batch; per grid every micro-batch size dividing the DP batch, ZeRO 0-3 (0 when
  // dp = 1), three recompute modes, each with and without sequence parallelism when tp > 1 (the
  // 2048 token rows of a sequence split over every tp here).
  int64_t grids = 0, layouts = 0;
  for (int tp : divisors(1024))
    for (int pp : divisors(1024 / tp)) {
      ++grids;
      const int dp = 1024 / (tp * pp);
      if (96 % tp || 12288 % tp || pp > 96 || 1536 % dp) continue;
      layouts += int64_t(divisors(1536 / dp).size()) * (dp > 1 ? 4 : 1) * 3 * (tp > 1 ? 2 : 1);
    }
  EXPECT_EQ(p.grids, grids);
  EXPECT_EQ(p.evaluated, layouts);
  ASSERT_FALSE(p.valid.empty());
  const PlanEntry& best = p.valid.front();
  std::printf("175B on 1024 H100: %lld grids, %lld layouts (%zu fit) planned in %.3f s; best dp %d "
              "pp %d tp %d mb %d zero %d recompute %s: %.2f s/step, %.0f tokens/s, MFU %.1f%%, "
              "%.1f GiB per GPU\n",
              (long long)p.grids, (long long)p.evaluated, p.valid.size(), s, best.c.dp, best.c.pp,
              best.c.tp, best.c.micro_batch, best.c.zero, recompute_name(best.c.recompute),
              best.time.total, best.time.tokens_per_s, 100 * best.time.mfu,
              double(best.memory.total()) / 1073741824.0);
#ifndef LOOM_SANITIZE  // under scripts/sanitize.sh every allocation records its whole stack
  EXPECT_LT(s, 10.0);
#endif
  EXPECT_LE(best.c.tp, 8);  // TP stays inside a node
  EXPECT_GT(best.time.mfu, 0.2);
  EXPECT_LT(best.time.mfu, cl.efficiency);
  EXPECT_LE(double(best.memory.total()), cl.memory_bytes());
}

}  // namespace
}  // namespace loom
