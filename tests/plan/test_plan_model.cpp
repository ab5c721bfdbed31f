// The plan's model without MPI runs: slots, shapes, activations vs GPTStage, ZeRO, times.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "layout/param_layout.h"
#include "layout/run_layout.h"
#include "layout/schedule.h"
#include "model/gpt_stage.h"
#include "plan/planner.h"
#include "plan/report.h"
#include "tests/plan/plan_test_util.h"
#include "tests/support/configs.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

using namespace plan;

ModelConfig tiny() { return test::gpt_model(4, 4, 32, 97, 8); }

PlanModel cpu_model(const ModelConfig& m, int global_batch) {
  PlanModel pm;
  pm.model = m;
  pm.global_batch = global_batch;
  return pm;
}

// The layout of rank (tp_rank, stage) of a tp x pp grid running micro-batches of mb sequences
// with `slots` of them in flight: GPipe over `slots` micro-batches keeps exactly that many.
RunLayout stage_layout(const ModelConfig& m, int tp, int tp_rank, int pp, int stage, int mb,
                       int slots, Recompute r = Recompute::None) {
  Config cfg;
  cfg.model = m;
  cfg.parallel.tp = tp, cfg.parallel.pp = pp, cfg.parallel.micro_batch_size = mb;
  cfg.parallel.schedule = "gpipe";
  cfg.train.global_batch_size = mb * slots;
  cfg.train.recompute = recompute_name(r);
  const RunLayout run(cfg, GridDims{1, pp, tp}, Coord{0, stage, tp_rank});
  EXPECT_EQ(run.slots(), slots);
  return run;
}

// Activation bytes of a GPTStage allocated for `run` on the cpu backend.
size_t stage_activation_bytes(const RunLayout& run, ParallelCtx& pc) {
  const auto be = make_cpu_backend();
  GPTStage stage(run, run.memory(be->traits()), pc, *be);
  return stage.activation_bytes();
}

ClusterSpec gpu_nodes(int nodes) {
  ClusterSpec c = parse_cluster(
      "device: cuda\nnodes: 1\ngpus_per_node: 8\ngpu_memory_gib: 80\npeak_flops: 1e15\n"
      "intra_node: {bandwidth_gbps: 3600, latency_us: 2}\n"
      "inter_node: {bandwidth_gbps: 400, latency_us: 5}\n",
      "gpu.yaml");
  c.nodes = nodes;
  return c;
}

TEST(PlanModel, SlotsEqualTheSchedulesInFlightBound) {
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::GPipe})
    for (int pp = 1; pp <= 6; ++pp)
      for (int m = 1; m <= 9; ++m)
        for (int s = 0; s < pp; ++s)
          EXPECT_EQ(slots_in_flight(kind, pp, s, m), max_in_flight(make_schedule(kind, pp, s, m)))
              << schedule_name(kind) << " pp " << pp << " stage " << s << " m " << m;
}

TEST(PlanModel, StageShapesCountWhatParamLayoutHolds) {
  ModelConfig m = tiny();
  for (int tp : {1, 2, 4})
    for (int pp : {1, 2, 3}) {
      const auto shapes = stage_shapes(m, tp, pp);
      ASSERT_EQ(int(shapes.size()), pp);
      for (int s = 0; s < pp; ++s) {
        const StageShape& sh = shapes[size_t(s)];
        for (int r = 0; r < tp; ++r) EXPECT_EQ(sh.total, ParamLayout(m, tp, r, pp, s).total());
        EXPECT_EQ(sh.layer_elems + sh.other, sh.total);
        EXPECT_EQ(sh.first, s == 0);
        EXPECT_EQ(sh.last, s == pp - 1);
        EXPECT_EQ(sh.wte > 0, s == 0 || s == pp - 1);  // tied copy on the last stage
        EXPECT_EQ(sh.vocab_local, 128);                // 97 padded to 128*tp, split over tp
      }
    }
}

// GPTStage allocates activations without communicating, so any (stage, TP rank) layout can be
// built on a one-rank context and compared with the model.
TEST(PlanModel, ActivationsEqualGPTStageForAnyStageAndTpRank) {
  test::ensure_mpi();
  auto pc = make_parallel_ctx(Grid(1, 1, 1), MPI_COMM_SELF);
  ModelConfig m = tiny();
  PlanModel pm = cpu_model(m, 8);
  for (int tp : {1, 2, 4})
    for (int pp : {1, 2, 3})
      for (int mb : {1, 3})
        for (int slots : {1, 2}) {
          const auto shapes = stage_shapes(m, tp, pp);
          for (int s = 0; s < pp; ++s) {
            const RunLayout run = stage_layout(m, tp, tp - 1, pp, s, mb, slots);
            Candidate c;
            c.tp = tp, c.pp = pp, c.micro_batch = mb;
            EXPECT_EQ(activation_bytes(pm, c, shapes[size_t(s)], slots),
                      stage_activation_bytes(run, *pc))
                << "tp " << tp << " pp " << pp << " stage " << s << " mb " << mb;
          }
        }
}

TEST(PlanModel, ZeroPaddingAndShardsFollowZeroOptimizer) {
  ModelConfig m = tiny();
  m.n_layer = 3, m.n_head = 3, m.d_model = 30;  // 37710 elements: not a multiple of 4
  PlanModel pm = cpu_model(m, 8);
  const StageShape sh = stage_shapes(m, 1, 1)[0];
  ASSERT_EQ(sh.total % 4, 2u);
  Candidate c;
  c.dp = 4;
  const uint64_t shard = (sh.total + 3) / 4;
  for (int zero : {0, 1, 2}) {
    c.zero = zero;
    const MemoryEstimate first = stage_memory(pm, c, sh, 2, 0, 0);
    const MemoryEstimate last = stage_memory(pm, c, sh, 2, 0, 3);
    EXPECT_EQ(first.params, 4 * shard * 4);  // padded to dp * shard at every stage
    EXPECT_EQ(first.grads, (zero < 2 ? sh.total : shard) * 4);
    EXPECT_EQ(first.optimizer, (zero == 0 ? sh.total : shard) * 8);
    EXPECT_EQ(last.optimizer, (zero == 0 ? sh.total : sh.total - 3 * shard) * 8);
    EXPECT_EQ(first.grad_buckets, zero == 2 ? (sh.widest_layer + sh.other) * 4 : 0);
    EXPECT_TRUE(first.exact);
  }
  c.zero = 3;
  const MemoryEstimate z3 = stage_memory(pm, c, sh, 2, 0, 0);
  EXPECT_EQ(z3.params, shard * 4);  // the shard only, plus working copies of one layer
  EXPECT_EQ(z3.param_gather, (sh.widest_layer + sh.other) * 4);
  EXPECT_EQ(z3.grad_buckets, (sh.widest_layer + sh.other) * 4);
}

TEST(PlanModel, MixedPrecisionIs18BytesPerParameterBeforeSharding) {
  ModelConfig m = tiny();
  PlanModel pm = cpu_model(m, 8);
  pm.device = "cuda";
  pm.prec = precision_of("bf16");
  const StageShape sh = stage_shapes(m, 1, 1)[0];
  Candidate c;
  MemoryEstimate r = stage_memory(pm, c, sh, 1, 0);
  // fp32 master 4 + bf16 compute copy 2 + fp32 gradient 4 + AdamW moments 8.
  EXPECT_EQ(r.params + r.grads + r.optimizer, 18 * sh.total);
  EXPECT_FALSE(r.exact);
  // ZeRO-1 over 8 ranks shards the moments only: the fp32 master weights are the parameter
  // buffer every rank updates its shard of and all-gathers (padded to 8 shards), and the
  // compute copy is refreshed from it.
  c.dp = 8, c.zero = 1;
  r = stage_memory(pm, c, sh, 1, 0);
  const uint64_t shard = (sh.total + 7) / 8;
  EXPECT_EQ(r.params + r.grads + r.optimizer, 6 * 8 * shard + 4 * sh.total + 8 * shard);
}

TEST(PlanModel, RecomputeKeepsLessThanStoringEverything) {
  ModelConfig m = tiny();
  PlanModel pm = cpu_model(m, 8);
  const StageShape sh = stage_shapes(m, 2, 1)[0];
  Candidate c;
  c.tp = 2, c.micro_batch = 2;
  uint64_t by[3];
  for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    c.recompute = r;
    by[int(r)] = activation_bytes(pm, c, sh, 3);
  }
  EXPECT_GT(by[0], by[1]);
  EXPECT_GT(by[1], by[2]);
  // Selective drops (B, heads/tp, T, T) probabilities per layer per slot, keeps one layer's worth.
  const uint64_t att = 2 * 2 * 8 * 8 * 4;  // B * local heads * T * T * 4 bytes
  EXPECT_EQ(by[0] - by[1], 3 * 4 * att - att);
}

// GPTStage with each recompute mode, built on one rank as above.
TEST(PlanModel, RecomputeActivationsEqualGPTStage) {
  test::ensure_mpi();
  auto pc = make_parallel_ctx(Grid(1, 1, 1), MPI_COMM_SELF);
  ModelConfig m = tiny();
  PlanModel pm = cpu_model(m, 8);
  for (Recompute r : {Recompute::Selective, Recompute::Full})
    for (int tp : {1, 2})
      for (int pp : {1, 2}) {
        const auto shapes = stage_shapes(m, tp, pp);
        for (int s = 0; s < pp; ++s) {
          const RunLayout run = stage_layout(m, tp, 0, pp, s, 2, 3, r);
          Candidate c;
          c.tp = tp, c.pp = pp, c.micro_batch = 2, c.recompute = r;
          EXPECT_EQ(activation_bytes(pm, c, shapes[size_t(s)], 3), stage_activation_bytes(run, *pc))
              << recompute_name(r) << " tp " << tp << " pp " << pp << " stage " << s;
        }
      }
}

TEST(PlanModel, CommVolumeOfOneRankIsZeroAndTpCountsBlocks) {
  ModelConfig m = tiny();
  PlanModel pm = cpu_model(m, 8);
  Candidate c;
  CommVolume v = step_comm_volume(pm, c, stage_shapes(m, 1, 1)[0], 4);
  EXPECT_EQ(v.tp.bytes + v.pp.bytes + v.dp.bytes + v.embed.bytes + v.world.bytes, 0u);
  c.tp = 2, c.micro_batch = 2;
  v = step_comm_volume(pm, c, stage_shapes(m, 2, 1)[0], 4);
  const uint64_t NC = 2 * 8 * 32 * 4, N = 2 * 8;
  EXPECT_EQ(v.tp.bytes, 4 * ((4 * 4 + 2) * NC + 3 * N * 4));  // 4 micro-batches
  EXPECT_EQ(v.world.bytes, 16u);
  EXPECT_TRUE(v.exact);
}

TEST(PlanModel, PlacementPutsTpInANodeAndDpAcrossNodes) {
  ClusterSpec cl = gpu_nodes(2);
  Candidate c;
  c.tp = 8, c.dp = 2;
  Placement p = place(cl, c, "tp-dp-pp");
  EXPECT_FALSE(p.tp.spans_nodes);
  EXPECT_DOUBLE_EQ(p.tp.bytes_per_s, 450e9);
  EXPECT_TRUE(p.dp.spans_nodes);
  EXPECT_DOUBLE_EQ(p.dp.bytes_per_s, 50e9);  // one NIC per member on each node
  c.tp = 2, c.dp = 8;                        // 4 DP members per node share 4 NICs
  p = place(cl, c, "tp-dp-pp");
  EXPECT_TRUE(p.dp.spans_nodes);
  EXPECT_DOUBLE_EQ(p.dp.bytes_per_s, 200e9);
  c.tp = 1, c.dp = 8, c.pp = 2;  // stages on different nodes
  p = place(cl, c, "tp-dp-pp");
  EXPECT_FALSE(p.dp.spans_nodes);
  EXPECT_TRUE(p.pp.spans_nodes);
  EXPECT_TRUE(p.embed.spans_nodes);
  p = place(cl, c, "pp-tp-dp");  // stages innermost: pipeline pairs share nodes
  EXPECT_FALSE(p.pp.spans_nodes);
  EXPECT_TRUE(p.dp.spans_nodes);
}

TEST(PlanModel, AlphaBetaCollectiveTimes) {
  AxisLink l;
  l.size = 4, l.bytes_per_s = 1e9, l.latency_s = 1e-6;
  EXPECT_NEAR(all_reduce_s(l, 1e9, 1), 1.5 + 6e-6, 1e-12);  // 2(n-1)/n, 2(n-1) hops
  EXPECT_NEAR(gather_s(l, 1e9, 2), 0.75 + 6e-6, 1e-12);     // (n-1)/n, n-1 hops per call
  EXPECT_NEAR(p2p_s(l, 1e9, 3), 1.0 + 3e-6, 1e-12);
  l.size = 1;
  EXPECT_EQ(all_reduce_s(l, 1e9, 1), 0.0);
}

TEST(PlanModel, PipelineBubbleIsItsShareOfThePipelinedTime) {
  ModelConfig m = tiny();
  PlanModel pm = cpu_model(m, 16);
  ClusterSpec cl = test::cpu_cluster();
  Candidate c;
  c.pp = 4, c.micro_batch = 1;
  const auto shapes = stage_shapes(m, 1, 4);
  StepTime t = step_time(pm, c, shapes, 16, cl, place(cl, c, pm.order));
  const double pipelined = t.compute + t.tp + t.pp + t.bubble;
  EXPECT_NEAR(t.bubble / pipelined, 3.0 / 19.0, 1e-9);
  EXPECT_NEAR(t.total, pipelined + t.dp + t.embed + t.world, 1e-12);
  EXPECT_GT(t.mfu, 0.0);
  EXPECT_LT(t.mfu, cl.efficiency);
}

TEST(PlanModel, ImpossibleGridsAreRejectedWithTheirReason) {
  ModelConfig m = tiny();
  m.n_head = 2, m.n_layer = 2;
  PlanModel pm = cpu_model(m, 6);
  Plan p = make_plan(pm, gpu_nodes(1));  // 8 devices
  auto reason = [&](int dp, int pp, int tp) {
    for (const auto& e : p.rejected)
      if (e.grid_only && e.c.dp == dp && e.c.pp == pp && e.c.tp == tp) return e.reason;
    return std::string();
  };
  EXPECT_EQ(reason(1, 1, 8), "tp 8 does not divide n_head 2");
  EXPECT_EQ(reason(1, 4, 2), "pp 4 > n_layer 2");
  EXPECT_EQ(reason(4, 2, 1), "global batch 6 is not divisible by dp 4");
  EXPECT_EQ(reason(2, 1, 4), "tp 4 does not divide n_head 2");
  EXPECT_EQ(reason(1, 8, 1), "pp 8 > n_layer 2");
  EXPECT_EQ(reason(2, 2, 2), "");  // dp 2 divides 6: planned
  EXPECT_FALSE(p.valid.empty());
  EXPECT_EQ(no_fit_message(p), "");
}

TEST(PlanModel, NoFitSaysWhichResourceIsShortAndByHowMuch) {
  ModelConfig m;
  m.n_layer = 96, m.n_head = 96, m.d_model = 12288, m.seq_len = 2048;
  PlanModel pm = cpu_model(m, 64);
  pm.device = "cuda", pm.prec = precision_of("bf16");
  Plan p = make_plan(pm, gpu_nodes(1));
  ASSERT_TRUE(p.valid.empty());
  const std::string msg = no_fit_message(p);
  EXPECT_NE(msg.find("device memory is short by"), std::string::npos) << msg;
  EXPECT_NE(msg.find("GiB per device"), std::string::npos) << msg;
  EXPECT_NE(msg.find("recompute full"), std::string::npos) << msg;  // the leanest layout

  ModelConfig one_head = tiny();
  one_head.n_head = 1;  // tp 1 only; 7 sequences: dp 1 only; pp 8 > 4 layers
  pm = cpu_model(one_head, 7);
  p = make_plan(pm, gpu_nodes(1));
  ASSERT_TRUE(p.valid.empty());
  EXPECT_NE(no_fit_message(p).find("no (dp, pp, tp, cp) layout of 8 devices"), std::string::npos)
      << no_fit_message(p);
}

TEST(PlanModel, JsonListsEveryEntry) {
  PlanModel pm = cpu_model(tiny(), 8);
  Plan p = make_plan(pm, test::cpu_cluster());
  ReportOptions o;
  o.config_path = "tiny.yaml";
  auto j = nlohmann::json::parse(format_json(p, o));
  EXPECT_EQ(j["valid"].size(), p.valid.size());
  EXPECT_EQ(j["rejected"].size(), p.rejected.size());
  EXPECT_EQ(j["evaluated"].get<int64_t>(), p.evaluated);
  const auto& best = j["valid"][0];
  EXPECT_EQ(best["memory"]["total"].get<uint64_t>(), p.valid[0].memory.total());
  EXPECT_GT(best["tokens_per_s"].get<double>(), 0.0);
  const std::string text = format_text(p, o);
  EXPECT_NE(text.find("tokens/s"), std::string::npos);
  EXPECT_NE(text.find("assumptions:"), std::string::npos);
}

}  // namespace
}  // namespace loom
