// Checkpoints across context parallelism: the ZeRO shards of a cp run span dp x cp, and the
// checkpoint holds whole canonical tensors and moments, so a run saved with parallel.cp 2
// resumes bitwise on its own layout and continues the same loss curve on layouts with other
// cp, dp, pp, tp and ZeRO stages; a cp=1 checkpoint resumes with cp 2. The same for a Mixture
// of Experts model (its experts' c_proj rows split per expert over tp) across tp, pp and dp, and
// across expert parallelism (each ep rank of the first expert replica writes its experts), also
// with the experts' ZeRO shards.
#include <gtest/gtest.h>

#include "ckpt/checkpoint.h"
#include "tests/ckpt/resume_util.h"
#include "tests/parallel/equivalence_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

struct Layout {
  int dp, pp, tp, cp, zero;
  bool moe = false;  // 4 experts, top-2, capacity 1.25
  int ep = 1;
  int size() const { return dp * pp * tp * cp; }
};

// The llama variant of the tiny model (RoPE positions follow the cp chunks), 8 sequences a
// step in micro-batches of 1.
Config with_layout(const Layout& l, const std::string& dir) {
  Config c = test::tiny_llama_config();
  c.parallel.dp = l.dp, c.parallel.pp = l.pp, c.parallel.tp = l.tp, c.parallel.cp = l.cp;
  c.parallel.micro_batch_size = 1;
  if (l.moe) {
    c.model.moe.num_experts = 4;
    c.model.moe.top_k = 2;
    c.model.moe.capacity_factor = 1.25;
  }
  c.optimizer.zero_stage = l.zero;
  c.parallel.ep = l.ep;
  c.train.steps = 20;
  c.checkpoint.dir = dir;
  return c;
}

test::TrainRun train(const Layout& l, const std::string& dir, int until, bool resume,
                     int save_at = -1) {
  return test::train_resumable(with_layout(l, dir), until, resume, save_at);
}

std::string fresh_dir(const std::string& name) {
  return test::fresh_dir("test_checkpoint_cp", name);
}

std::string name(const Layout& l) {
  return "dp" + std::to_string(l.dp) + " pp" + std::to_string(l.pp) + " tp" + std::to_string(l.tp) +
         " cp" + std::to_string(l.cp) + " zero" + std::to_string(l.zero) +
         (l.ep > 1 ? " ep" + std::to_string(l.ep) : "");
}

// 20 steps straight, and 10 saved then 10 resumed in `dir`, on layout l: the resumed run is
// bitwise the straight one. Returns the straight run.
test::TrainRun expect_bitwise_on_own_layout(const Layout& l, const std::string& dir) {
  const test::TrainRun straight = train(l, dir + "_straight", 20, false);
  const test::TrainRun first = train(l, dir, 10, false, 10);
  const test::TrainRun second = train(l, dir, 20, true);
  if (test::world_rank() == 0) test::expect_bitwise_resume(first, second, straight);
  return straight;
}

TEST(CheckpointCp, ExactResume) {
  expect_bitwise_on_own_layout({2, 1, 2, 2, 2}, fresh_dir("exact"));
}

TEST(CheckpointCp, ReshardAcrossContextParallelism) {
  const std::string dir = fresh_dir("reshard");
  const test::TrainRun straight = train({1, 1, 1, 1, 0}, dir + "_ref", 20, false);
  // Saved with cp 2 and ZeRO-3 over dp x cp = 4, resumed with other cp, layouts and stages.
  train({2, 2, 1, 2, 3}, dir, 10, false, 10);
  for (const Layout& l : {Layout{1, 1, 1, 1, 0}, Layout{2, 1, 1, 4, 1}, Layout{1, 2, 2, 2, 2},
                          Layout{2, 2, 2, 1, 3}}) {
    const test::TrainRun r = train(l, dir, 20, true);
    if (test::world_rank() == 0) test::expect_continues(r, straight, "cp2 -> " + name(l));
  }
  // Saved without context parallelism (ZeRO-1 over dp 4), resumed with cp 4.
  const std::string dir1 = fresh_dir("reshard_cp1");
  train({4, 1, 2, 1, 1}, dir1, 10, false, 10);
  const test::TrainRun r = train({1, 1, 2, 4, 2}, dir1, 20, true);
  if (test::world_rank() == 0) test::expect_continues(r, straight, "cp1 dp4 -> cp4");
}

TEST(CheckpointCp, MoeReshardAcrossLayouts) {
  const std::string dir = fresh_dir("moe");
  const test::TrainRun straight = train({1, 1, 1, 1, 0, true}, dir + "_ref", 20, false);
  train({2, 2, 2, 1, 2, true}, dir, 10, false, 10);
  for (const Layout& l :
       {Layout{1, 1, 1, 1, 0, true}, Layout{1, 2, 4, 1, 3, true}, Layout{8, 1, 1, 1, 1, true}}) {
    const test::TrainRun r = train(l, dir, 20, true);
    if (test::world_rank() == 0)
      test::expect_continues(r, straight, "moe dp2 pp2 tp2 -> " + name(l));
  }
}

TEST(CheckpointCp, MoeAcrossExpertParallelism) {
  const std::string dir = fresh_dir("moe_ep");
  // Bitwise on its own layout: dp4 with the 4 experts one per rank, under tp 2.
  const test::TrainRun straight = expect_bitwise_on_own_layout({4, 1, 2, 1, 0, true, 4}, dir);
  // Onto one rank, other ep and ZeRO-2 without ep.
  for (const Layout& l :
       {Layout{1, 1, 1, 1, 0, true}, Layout{2, 2, 2, 1, 0, true, 2}, Layout{8, 1, 1, 1, 2, true}}) {
    const test::TrainRun r = train(l, dir, 20, true);
    if (test::world_rank() == 0) test::expect_continues(r, straight, "moe dp4 ep4 -> " + name(l));
  }
  // Saved without expert parallelism (ZeRO-3 over dp 2), resumed with ep 4 over dp 8.
  const std::string dir2 = fresh_dir("moe_ep_in");
  train({2, 2, 2, 1, 3, true}, dir2, 10, false, 10);
  const test::TrainRun r = train({8, 1, 1, 1, 0, true, 4}, dir2, 20, true);
  if (test::world_rank() == 0) test::expect_continues(r, straight, "moe dp2 zero3 -> dp8 ep4");
}

// ZeRO with expert parallelism: the experts' moments (ZeRO-3: parameters too) are sharded over
// their own replicas and gathered to the first expert replica's ranks, which write them.
TEST(CheckpointCp, MoeExpertParallelWithZero) {
  const std::string dir = fresh_dir("moe_ep_zero");
  const test::TrainRun straight = expect_bitwise_on_own_layout({4, 1, 2, 1, 3, true, 2}, dir);
  for (const Layout& l : {Layout{1, 1, 1, 1, 0, true}, Layout{2, 2, 1, 1, 1, true, 2},
                          Layout{8, 1, 1, 1, 2, true, 4}}) {
    const test::TrainRun r = train(l, dir, 20, true);
    if (test::world_rank() == 0)
      test::expect_continues(r, straight, "moe dp4 ep2 zero3 -> " + name(l));
  }
}

}  // namespace
}  // namespace loom
