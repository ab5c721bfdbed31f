// Topology decisions on synthetic host lists: TP groups across nodes, GPU binding, the rank map.
#include <gtest/gtest.h>

#include <functional>

#include "core/check.h"
#include "parallel/topology.h"

namespace loom {
namespace {

// counts[i] ranks on host "node<i>", numbered node by node.
std::vector<std::string> nodes(const std::vector<int>& counts) {
  std::vector<std::string> hosts;
  for (size_t i = 0; i < counts.size(); ++i)
    for (int k = 0; k < counts[i]; ++k) hosts.push_back("node" + std::to_string(i));
  return hosts;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string user_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no UserError)";
}

TEST(Topology, TwoNodesOfEightWithTp8KeepEveryGroupInsideANode) {
  const auto hosts = nodes({8, 8});
  Grid grid(2, 1, 8);
  EXPECT_TRUE(tp_groups_crossing_nodes(grid, hosts).empty());
  const std::vector<int> gpus = assign_gpus(hosts, std::vector<int>(16, 8));
  for (int r = 0; r < 16; ++r) EXPECT_EQ(gpus[size_t(r)], r % 8) << r;
  // With pipeline stages across the nodes as well (dp1 x pp2 x tp8).
  EXPECT_TRUE(tp_groups_crossing_nodes(Grid(1, 2, 8), hosts).empty());
}

TEST(Topology, Tp16OnNodesOfEightCrosses) {
  const auto hosts = nodes({8, 8});
  Grid grid(1, 1, 16);
  const auto crossing = tp_groups_crossing_nodes(grid, hosts);
  ASSERT_EQ(crossing.size(), 1u);
  EXPECT_EQ(crossing[0].size(), 16u);
  const std::string warn = tp_crossing_message(grid, hosts, crossing, false);
  EXPECT_TRUE(has(warn,
                  "1 of 1 tensor-parallel group spans nodes (parallel.tp=16, e.g. ranks "
                  "0-15 on hosts node0, node1; 8 ranks per node)"))
      << warn;
  EXPECT_TRUE(has(warn, "lower parallel.tp to at most 8")) << warn;
  EXPECT_TRUE(has(warn, "parallel.strict_topology: true makes this an error")) << warn;
  const std::string err = tp_crossing_message(grid, hosts, crossing, true);
  EXPECT_EQ(err.rfind("parallel.strict_topology: 1 of 1 tensor-parallel group spans", 0), 0u)
      << err;
  EXPECT_TRUE(has(err, "set parallel.strict_topology: false to run anyway")) << err;
}

TEST(Topology, TpNotInnermostCrossesAndNamesTheOrder) {
  const auto hosts = nodes({8, 8});
  Grid grid(2, 1, 8, "dp-tp-pp");  // a TP group is every other rank
  const auto crossing = tp_groups_crossing_nodes(grid, hosts);
  ASSERT_EQ(crossing.size(), 2u);
  EXPECT_EQ(crossing[0], (std::vector<int>{0, 2, 4, 6, 8, 10, 12, 14}));
  const std::string warn = tp_crossing_message(grid, hosts, crossing, false);
  EXPECT_TRUE(has(warn, "2 of 2 tensor-parallel groups span nodes")) << warn;
  EXPECT_TRUE(has(warn, "ranks 0,2,4,6,8,10,12,14 on hosts node0, node1")) << warn;
  EXPECT_TRUE(has(warn, "start parallel.order with tp (e.g. tp-dp-pp, not dp-tp-pp)")) << warn;
}

TEST(Topology, UnevenNodesCrossWhereANodeBoundarySplitsAGroup) {
  const auto hosts = nodes({6, 10});
  Grid grid(4, 1, 4);  // groups 0-3, 4-7, 8-11, 12-15; 4-7 straddles node0/node1
  const auto crossing = tp_groups_crossing_nodes(grid, hosts);
  ASSERT_EQ(crossing.size(), 1u);
  EXPECT_EQ(crossing[0], (std::vector<int>{4, 5, 6, 7}));
  const std::string warn = tp_crossing_message(grid, hosts, crossing, false);
  EXPECT_TRUE(has(warn, "1 of 4 tensor-parallel groups span nodes")) << warn;
  EXPECT_TRUE(has(warn, "6 to 10 ranks per node")) << warn;
  EXPECT_TRUE(has(warn, "run the same number of ranks on every node, a multiple of parallel.tp=4"))
      << warn;
  // Node-local ranks restart on each host.
  const std::vector<int> local = node_local_ranks(hosts);
  EXPECT_EQ(local[5], 5);
  EXPECT_EQ(local[6], 0);
  EXPECT_EQ(local[15], 9);
}

TEST(Topology, NodeLocalRanksFollowWorldOrderWithinEachHost) {
  EXPECT_EQ(node_local_ranks({"a", "b", "a", "b", "a"}), (std::vector<int>{0, 0, 1, 1, 2}));
}

TEST(Topology, MoreRanksThanGpusOnANodeIsOneClearError) {
  const auto hosts = nodes({2, 4});
  const std::string e = user_error([&] { assign_gpus(hosts, std::vector<int>(6, 2)); });
  EXPECT_EQ(e,
            "4 ranks on host node1 (world ranks 2-5) but 2 GPUs: launch 2 tasks per node "
            "(mpirun --map-by ppr:2:node, srun --ntasks-per-node=2) or give each task its "
            "own GPU (srun --gpus-per-task=1)");
  // Fewer ranks than GPUs is fine: the first GPUs are used.
  EXPECT_EQ(assign_gpus(nodes({2}), std::vector<int>{8, 8}), (std::vector<int>{0, 1}));
}

// The host-staged testing mode (LOOM_DEVICE_COMM=host): ranks share the GPUs they see, round
// robin; a rank that sees none is still an error.
TEST(Topology, SharingGpusTakesThemRoundRobin) {
  const auto hosts = nodes({2, 4});
  std::vector<std::vector<std::string>> visible(6, {"GPU-a", "GPU-b"});
  EXPECT_EQ(assign_gpus(hosts, visible, true), (std::vector<int>{0, 1, 0, 1, 0, 1}));
  visible.assign(6, {"GPU-a"});
  EXPECT_EQ(assign_gpus(hosts, visible, true), std::vector<int>(6, 0));
  visible[3].clear();
  EXPECT_TRUE(has(user_error([&] { assign_gpus(hosts, visible, true); }), "rank 3 on host node1"));
}

TEST(Topology, ARankWithoutAGpuIsAnError) {
  const std::string e = user_error([&] { assign_gpus(nodes({2}), std::vector<int>{1, 0}); });
  EXPECT_TRUE(has(e, "rank 1 on host node0 sees no GPU")) << e;
}

TEST(Topology, OneGpuPerTaskBindsEveryRankToItsDeviceZero) {
  // srun --gpus-per-task=1: each rank sees only its own GPU.
  const auto hosts = nodes({4, 4});
  std::vector<std::vector<std::string>> visible;
  for (int r = 0; r < 8; ++r) visible.push_back({"GPU-" + std::to_string(r % 4)});
  EXPECT_EQ(assign_gpus(hosts, visible), std::vector<int>(8, 0));
  // The same GPU id on two hosts is two GPUs; on one host it is a clash.
  visible[1] = visible[0];
  const std::string e = user_error([&] { assign_gpus(hosts, visible); });
  EXPECT_TRUE(has(e, "2 ranks on host node0 (world ranks 0-1) but 1 GPU: launch 1 task per node"))
      << e;
}

TEST(Topology, TwoRanksOfAHostOnOnePhysicalGpuIsAnError) {
  // Rank 0 sees B,A and takes its first (B); rank 1 sees only B.
  const std::string e = user_error([&] { assign_gpus(nodes({2}), {{"B", "A"}, {"B"}}); });
  EXPECT_TRUE(has(e, "ranks 0 and 1 on host node0 would both use GPU B")) << e;
}

TEST(Topology, EveryGpuVisibleToEveryRankUsesTheNodeLocalRank) {
  const auto hosts = nodes({3, 3});
  const std::vector<std::string> all = {"U0", "U1", "U2"};
  EXPECT_EQ(assign_gpus(hosts, std::vector<std::vector<std::string>>(6, all)),
            (std::vector<int>{0, 1, 2, 0, 1, 2}));
}

TEST(Topology, RankMapOneLinePerRank) {
  Grid grid(2, 2, 2);
  const auto hosts = nodes({8});
  auto lines = format_rank_map(grid, hosts, {});
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_EQ(lines[0],
            "grid dp2 x pp2 x tp2 = 8 ranks on 1 host, rank order tp-dp-pp (first axis "
            "innermost)");
  EXPECT_EQ(lines[1], "  rank  host   gpu  dp  pp  tp  local rank");
  EXPECT_EQ(lines[2], "     0  node0    -   0   0   0           0");
  EXPECT_EQ(lines[9], "     7  node0    -   1   1   1           7");
  lines = format_rank_map(grid, nodes({4, 4}), {0, 1, 2, 3, 0, 1, 2, 3});
  EXPECT_EQ(lines[0],
            "grid dp2 x pp2 x tp2 = 8 ranks on 2 hosts, rank order tp-dp-pp (first axis "
            "innermost)");
  EXPECT_EQ(lines[7], "     5  node1    1   0   1   1           1");
}

TEST(Topology, RankMapSummarizedPerHostBeyondMaxRows) {
  Grid grid(2, 10, 4);
  const auto hosts = nodes(std::vector<int>(10, 8));
  std::vector<int> gpus;
  for (int r = 0; r < 80; ++r) gpus.push_back(r % 8);
  auto lines = format_rank_map(grid, hosts, gpus);
  ASSERT_EQ(lines.size(), 11u);  // header + 10 hosts
  EXPECT_TRUE(has(lines[0], "80 ranks on 10 hosts")) << lines[0];
  EXPECT_EQ(lines[1], "  node0: 8 ranks 0-7, GPUs 0-7");
  EXPECT_EQ(lines[10], "  node9: 8 ranks 72-79, GPUs 0-7");
  lines = format_rank_map(grid, hosts, {}, 4);
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[1], "  node0: 8 ranks 0-7");
  EXPECT_EQ(lines[5], "  ... and 6 more hosts with 48 ranks");
}

TEST(Topology, IntRanges) {
  EXPECT_EQ(int_ranges({}), "");
  EXPECT_EQ(int_ranges({3}), "3");
  EXPECT_EQ(int_ranges({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
}

}  // namespace
}  // namespace loom
