// The plan of a Llama model: its parameters per stage, its memory against the memory model of
// a built RunLayout, its activations against GPTStage, and the refusal of tp not dividing
// n_kv_head in validation's words.
#include <gtest/gtest.h>

#include <string>

#include "core/check.h"
#include "layout/run_layout.h"
#include "model/flops.h"
#include "model/gpt_stage.h"
#include "plan/planner.h"
#include "tests/plan/plan_test_util.h"
#include "tests/support/configs.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

using namespace plan;

Config llama_config(const ModelConfig& m, int dp, int pp, int tp, int mb, int zero, Recompute r) {
  Config cfg;
  cfg.model = m;
  cfg.parallel.dp = dp, cfg.parallel.pp = pp, cfg.parallel.tp = tp;
  cfg.parallel.micro_batch_size = mb;
  cfg.train.global_batch_size = 8;
  cfg.optimizer.zero_stage = zero;
  cfg.train.recompute = recompute_name(r);
  return cfg;
}

TEST(PlanLlama, StageShapesHoldTheLlamaParameters) {
  for (bool tied : {true, false}) {
    ModelConfig m = test::tiny_llama(tied);
    // One rank holds everything: count_params with the vocabulary padded to 128.
    ModelConfig padded = m;
    padded.vocab_size = m.padded_vocab(1);
    EXPECT_EQ(int64_t(stage_shapes(m, 1, 1)[0].total), count_params(padded)) << tied;
    // tp 2: the matrices are split and the RMSNorm gains (2 x 32 per layer and 32 for the
    // final norm) are whole on both ranks.
    padded.vocab_size = m.padded_vocab(2);
    EXPECT_EQ(2 * int64_t(stage_shapes(m, 2, 1)[0].total), count_params(padded) + 4 * 64 + 32)
        << tied;
  }
}

// The plan builds a MemorySpec from its candidate; a run builds one from its RunLayout. The two
// must give the same bytes for every part, on cpu (fp32) and cuda (bf16), with context
// parallelism (cp 2, 4: T/cp rows, the ring's buffers, ZeRO over dp x cp), sequence parallelism
// and virtual stages.
TEST(PlanLlama, MemoryEqualsTheMemoryModelOfARunLayout) {
  int compared = 0;
  for (const char* device : {"cpu", "cuda"})
    for (bool tied : {true, false})
      for (int tp : {1, 2})
        for (int pp : {1, 2})
          for (int cp : {1, 2, 4})
            for (int vs = 0; vs < 4; ++vs)
              for (int zero : {0, 1, 2, 3})
                for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full}) {
                  const int dp = 2, mb = 2, v = 1 + vs / 2;
                  const bool sp = vs % 2 == 1;
                  if ((v > 1 && pp == 1) || (sp && tp == 1)) continue;
                  Config cfg = llama_config(test::tiny_llama(tied), dp, pp, tp, mb, zero, r);
                  cfg.parallel.cp = cp, cfg.parallel.virtual_stages = v;
                  cfg.parallel.sequence_parallel = sp;
                  PlanModel pm;
                  pm.model = cfg.model;
                  pm.global_batch = cfg.train.global_batch_size;
                  pm.device = device;
                  pm.prec = precision_of(std::string(device) == "cpu" ? "fp32" : "bf16");
                  Candidate c;
                  c.dp = dp, c.pp = pp, c.tp = tp, c.cp = cp, c.v = v, c.micro_batch = mb;
                  c.zero = zero, c.recompute = r, c.sp = sp;
                  const auto shapes = stage_shapes(cfg.model, tp, pp, v);
                  for (int s = 0; s < pp; ++s)
                    for (int d = 0; d < dp * cp; ++d) {
                      const RunLayout run(cfg, GridDims{dp, pp, tp, cp},
                                          Coord{d / cp, s, tp - 1, d % cp});
                      const RankMemory want = run.memory(pm.traits());
                      const MemoryEstimate got =
                          stage_memory(pm, c, shapes[size_t(s)], run.microbatches(), 0, d);
                      ++compared;
                      const std::string at =
                          str(device, " tied ", tied, " tp ", tp, " pp ", pp, " v ", v, " cp ", cp,
                              sp ? " sp" : "", " zero ", zero, " ", recompute_name(r), " stage ", s,
                              " replica ", d);
                      EXPECT_EQ(got.total(), want.total()) << at;
                      EXPECT_EQ(got.params, want.master_params + want.compute_weights) << at;
                      EXPECT_EQ(got.activations, want.activations + want.scratch + want.logits)
                          << at;
                      EXPECT_EQ(got.optimizer, want.optimizer) << at;
                    }
                }
  // device x tied x zero x recompute x (stage, tp, v, sp) rows: tp1 pp1: 1, tp1 pp2 (v 1, 2): 2 x
  // 2, tp2 pp1 (sp or not): 2, tp2 pp2: 4 x 2; each with dp x cp = 2, 4, 8 replicas.
  EXPECT_EQ(compared, 2 * 2 * 4 * 3 * (1 + 4 + 2 + 8) * (2 + 4 + 8));
}

// The llama block's activations are not GPT-2's: a GPT-2 of the same dims differs (bias-free
// qkv of (4 + 2 x 2) x 8 columns instead of 3 x 32, a gate|up hidden of 2 x 96, one statistic
// per row), so a plan that ignored the architecture would not pass the test above.
TEST(PlanLlama, ActivationsFollowTheArchitecture) {
  ModelConfig l = test::tiny_llama(), g = test::tiny_llama();
  g.arch = "gpt2", g.n_kv_head = 0, g.ffn_hidden = 0;
  PlanModel pl, pg;
  pl.model = l, pl.global_batch = 8;
  pg.model = g, pg.global_batch = 8;
  Candidate c;
  c.micro_batch = 2;
  EXPECT_NE(activation_bytes(pl, c, stage_shapes(l, 1, 1)[0], 1),
            activation_bytes(pg, c, stage_shapes(g, 1, 1)[0], 1));
}

// GPTStage allocates its arenas without communicating: any (stage, TP rank) of a Llama layout
// is built on a one-rank context and its activation bytes compared with the plan's.
TEST(PlanLlama, ActivationsEqualGPTStage) {
  test::ensure_mpi();
  auto pc = make_parallel_ctx(Grid(1, 1, 1), MPI_COMM_SELF);
  const auto be = make_cpu_backend();
  for (int tp : {1, 2})
    for (int pp : {1, 2})
      for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full}) {
        Config cfg = llama_config(test::tiny_llama(), 1, pp, tp, 2, 0, r);
        cfg.parallel.schedule = "gpipe";  // 4 micro-batches in flight
        PlanModel pm;
        pm.model = cfg.model, pm.global_batch = 8;
        Candidate c;
        c.pp = pp, c.tp = tp, c.micro_batch = 2, c.recompute = r;
        const auto shapes = stage_shapes(cfg.model, tp, pp);
        for (int s = 0; s < pp; ++s) {
          const RunLayout run(cfg, GridDims{1, pp, tp}, Coord{0, s, tp - 1});
          GPTStage stage(run, run.memory(be->traits()), *pc, *be);
          EXPECT_EQ(activation_bytes(pm, c, shapes[size_t(s)], run.slots()),
                    stage.activation_bytes())
              << "tp " << tp << " pp " << pp << " " << recompute_name(r) << " stage " << s;
        }
      }
}

// On one device nothing but compute takes time, so MFU is the cluster's efficiency up to what
// flops_per_token counts and the step does not: the final norm's 32 gains (6 x 32 FLOPs per
// token). Tied or not: the untied input table is a lookup on both sides. Vocabulary 128: no
// padded rows in the step's classifier.
TEST(PlanLlama, OneDeviceMfuIsTheEfficiencyTiedOrUntied) {
  for (bool tied : {true, false}) {
    ModelConfig m = test::tiny_llama(tied);
    m.vocab_size = 128;
    PlanModel pm;
    pm.model = m, pm.global_batch = 8;
    ClusterSpec cl = test::cpu_cluster();
    cl.gpus_per_node = 1;
    Candidate c;
    c.micro_batch = 8;
    const StepTime t = step_time(pm, c, stage_shapes(m, 1, 1), 1, cl, place(cl, c, pm.order));
    const double fpt = flops_per_token(m);
    EXPECT_NEAR(t.mfu, cl.efficiency * fpt / (fpt - 6 * 32), 1e-12) << "tied " << tied;
  }
}

// tp 4 divides the 4 query heads and d_model but not the 2 kv heads: the plan rejects the grid
// with validation's own line for parallel.tp 4.
TEST(PlanLlama, TpNotDividingKvHeadsIsRefusedAsValidationRefusesIt) {
  ModelConfig m = test::tiny_llama();
  Config cfg;
  cfg.model = m;
  cfg.parallel.tp = 4;
  std::string validation;
  for (const std::string& e : validate(cfg, 0))
    if (e.rfind("parallel.tp:", 0) == 0) validation = e;
  ASSERT_NE(validation.find("n_kv_head"), std::string::npos) << validation;

  PlanModel pm;
  pm.model = m, pm.global_batch = 8;
  ClusterSpec cl = test::cpu_cluster();
  cl.nodes = 1, cl.gpus_per_node = 4;
  const Plan p = make_plan(pm, cl);
  bool seen = false;
  for (const PlanEntry& e : p.rejected)
    if (e.grid_only && e.c.tp == 4) {
      EXPECT_EQ(e.reason, validation);
      seen = true;
    }
  EXPECT_TRUE(seen);
  for (const PlanEntry& e : p.valid) EXPECT_LE(e.c.tp, 2);
  EXPECT_FALSE(p.valid.empty());
}

}  // namespace
}  // namespace loom
