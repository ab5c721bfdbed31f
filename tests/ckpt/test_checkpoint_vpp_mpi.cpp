// Checkpoints across virtual pipeline stages: tensors keep their global layer names, so a run
// saved with interleaved 1F1B (parallel.virtual_stages 2) resumes bitwise on its own layout
// and continues the same loss curve on layouts with other pp and v; a v=1 checkpoint resumes
// with v=2.
#include <gtest/gtest.h>

#include "ckpt/checkpoint.h"
#include "tests/ckpt/resume_util.h"
#include "tests/parallel/equivalence_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

struct Layout {
  int dp, pp, tp, v, zero;
};

// 4 layers, 8 sequences a step, micro-batches of 1: every layout below splits them.
Config with_layout(const Layout& l, const std::string& dir) {
  Config c = test::tiny_parallel_config();
  c.parallel.dp = l.dp, c.parallel.pp = l.pp, c.parallel.tp = l.tp;
  c.parallel.virtual_stages = l.v;
  c.parallel.micro_batch_size = 1;
  c.optimizer.zero_stage = l.zero;
  c.train.steps = 20;
  c.checkpoint.dir = dir;
  return c;
}

test::TrainRun train(const Layout& l, const std::string& dir, int until, bool resume,
                     int save_at = -1) {
  return test::train_resumable(with_layout(l, dir), until, resume, save_at);
}

std::string fresh_dir(const std::string& name) {
  return test::fresh_dir("test_checkpoint_vpp", name);
}

std::string name(const Layout& l) {
  return "dp" + std::to_string(l.dp) + " pp" + std::to_string(l.pp) + " v" + std::to_string(l.v) +
         " tp" + std::to_string(l.tp) + " zero" + std::to_string(l.zero);
}

TEST(CheckpointVpp, ExactResumeInterleaved) {
  const Layout l{2, 2, 2, 2, 1};
  const std::string dir = fresh_dir("exact");
  const test::TrainRun straight = train(l, dir + "_straight", 20, false);
  const test::TrainRun first = train(l, dir, 10, false, 10);
  const test::TrainRun second = train(l, dir, 20, true);
  if (test::world_rank() == 0) test::expect_bitwise_resume(first, second, straight);
}

TEST(CheckpointVpp, ReshardAcrossVirtualStages) {
  const std::string dir = fresh_dir("reshard");
  const test::TrainRun straight = train({1, 1, 1, 1, 0}, dir + "_ref", 20, false);
  // Saved with v=2 (chunk c of stage s holds layer 2c + s), resumed with v=1 and other pp.
  train({2, 2, 2, 2, 1}, dir, 10, false, 10);
  for (const Layout& l : {Layout{1, 1, 1, 1, 0}, Layout{1, 4, 2, 1, 0}, Layout{2, 2, 2, 1, 2},
                          Layout{1, 2, 1, 2, 0}, Layout{4, 2, 1, 2, 3}}) {
    const test::TrainRun r = train(l, dir, 20, true);
    if (test::world_rank() == 0) test::expect_continues(r, straight, "v2 -> " + name(l));
  }
  // Saved with v=1 on 4 stages, resumed interleaved on 2 stages of 2 chunks.
  const std::string dir1 = fresh_dir("reshard_v1");
  train({1, 4, 2, 1, 0}, dir1, 10, false, 10);
  const test::TrainRun r = train({2, 2, 2, 2, 2}, dir1, 20, true);
  if (test::world_rank() == 0) test::expect_continues(r, straight, "v1 pp4 -> v2 pp2");
}

}  // namespace
}  // namespace loom
