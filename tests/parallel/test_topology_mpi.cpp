// Topology under mpirun (4 ranks): gathered hosts, strict TP placement and GPU-count errors stop
// every rank with one message, GPU assignment, the rank map.
#include <gtest/gtest.h>

#include "core/check.h"
#include "parallel/collective.h"
#include "parallel/parallel_ctx.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

TEST(TopologyMpi, EveryRankKnowsEveryHost) {
  ASSERT_EQ(test::world_size(), 4);
  auto pc = make_parallel_ctx(Grid(1, 1, 4));
  ASSERT_EQ(pc->hosts.size(), 4u);
  for (const auto& h : pc->hosts) EXPECT_EQ(h, pc->host);
  EXPECT_EQ(pc->local_size, 4);  // one machine
  EXPECT_NO_THROW(check_topology(*pc, true));
}

TEST(TopologyMpi, StrictTopologyStopsEveryRankWithOneMessage) {
  auto pc = make_parallel_ctx(Grid(1, 1, 4));
  pc->hosts = {"a", "a", "b", "b"};  // as if two nodes of two ranks: the TP group crosses them
  EXPECT_NO_THROW(collectively([&] { check_topology(*pc, false); }));  // a warning on rank 0
  testing::internal::CaptureStderr();
  bool stopped = false;
  try {
    collectively([&] { check_topology(*pc, true); });
  } catch (const ReportedError&) {
    stopped = true;
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(stopped);  // on every rank
  if (pc->rank == 0)
    EXPECT_EQ(err.rfind("loom: error: parallel.strict_topology: 1 of 1 tensor-parallel group "
                        "spans nodes (parallel.tp=4, e.g. ranks 0-3 on hosts a, b; 2 ranks per "
                        "node)",
                        0),
              0u)
        << err;
  else
    EXPECT_EQ(err, "");  // one message for the job, from the lowest failing rank
}

TEST(TopologyMpi, GpusFollowTheNodeLocalRankAndTooFewStopEveryRank) {
  auto pc = make_parallel_ctx(Grid(2, 1, 2));
  pc->hosts = {"a", "a", "b", "b"};
  EXPECT_EQ(gpus_for_ranks(*pc, 2), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(gpu_for_rank(*pc, 8), pc->rank % 2);
  std::string msg;
  try {
    gpus_for_ranks(*pc, 1);
  } catch (const UserError& e) {
    msg = e.what();
  }
  // The same error on every rank (each decides from the whole job's data).
  EXPECT_EQ(msg,
            "2 ranks on host a (world ranks 0-1) but 1 GPU: launch 1 task per node (mpirun "
            "--map-by ppr:1:node, srun --ntasks-per-node=1) or give each task its own GPU "
            "(srun --gpus-per-task=1)");
  // One GPU per task, named by id: every rank takes its device 0.
  const std::vector<int> ids = gpus_for_ranks(*pc, {"GPU-" + std::to_string(pc->rank)});
  EXPECT_EQ(ids, std::vector<int>(4, 0));
  // Every GPU of the node visible to both of its ranks.
  EXPECT_EQ(gpus_for_ranks(*pc, std::vector<std::string>{"GPU-x", "GPU-y"}),
            (std::vector<int>{0, 1, 0, 1}));
}

TEST(TopologyMpi, RankMapOnEveryRankAlike) {
  auto pc = make_parallel_ctx(Grid(2, 1, 2));
  const auto lines = rank_map_lines(*pc, {});
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0],
            "grid dp2 x pp1 x tp2 = 4 ranks on 1 host, rank order tp-dp-pp (first axis "
            "innermost)");
  EXPECT_NE(lines[5].find(pc->hosts[3]), std::string::npos) << lines[5];
}

}  // namespace
}  // namespace loom
