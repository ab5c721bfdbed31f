// RunLayout against the schedules and ParamLayout it resolves, and the memory model against
// what a Trainer allocates.
#include <gtest/gtest.h>

#include "core/check.h"
#include "layout/run_layout.h"
#include "model/gpt_stage.h"
#include "parallel/parallel_ctx.h"
#include "tests/support/configs.h"
#include "tests/support/mpi_test_env.h"
#include "train/trainer.h"

namespace loom {
namespace {

Config small(int tp, int pp, int mb, int global_batch) {
  Config c;
  c.model = test::gpt_model(4, 4, 32, 97, 8);
  c.parallel.tp = tp, c.parallel.pp = pp, c.parallel.micro_batch_size = mb;
  c.train.global_batch_size = global_batch;
  return c;
}

TEST(RunLayout, ResolvesBatchScheduleAndShapesOfEachRank) {
  Config c = small(2, 2, 2, 16);  // dp 2: 16 / (2 * 2) = 4 micro-batches per step
  for (const char* sched : {"1f1b", "gpipe"}) {
    c.parallel.schedule = sched;
    for (int pp = 0; pp < 2; ++pp)
      for (int tp = 0; tp < 2; ++tp) {
        const RunLayout run(c, GridDims{2, 2, 2}, Coord{1, pp, tp});
        SCOPED_TRACE(std::string(sched) + " pp" + std::to_string(pp) + " tp" + std::to_string(tp));
        EXPECT_EQ(run.microbatches(), 4);
        EXPECT_EQ(run.slots(),
                  max_in_flight(make_schedule(parse_schedule(sched), 2, pp, run.microbatches())));
        EXPECT_EQ(run.first_stage(), pp == 0);
        EXPECT_EQ(run.last_stage(), pp == 1);
        EXPECT_EQ(run.dims().NH, 2);
        EXPECT_EQ(run.dims().Cl(), 16);
        EXPECT_EQ(run.dims().N(), 16);
        const ParamLayout want(c.model, 2, tp, 2, pp);
        EXPECT_EQ(run.params().total(), want.total());
        EXPECT_EQ(run.params().layers().first_layer, want.layers().first_layer);
        EXPECT_EQ(run.stage_spec().layers, 2);
        EXPECT_EQ(run.stage_spec().slots, run.slots());
      }
  }
}

TEST(RunLayout, StringsBecomeEnumsOnce) {
  Config c = small(1, 1, 1, 1);
  c.train.recompute = "selective";
  c.parallel.schedule = "gpipe";
  const RunLayout run(c, GridDims{}, Coord{});
  EXPECT_EQ(run.recompute(), Recompute::Selective);
  EXPECT_EQ(run.schedule(), ScheduleKind::GPipe);
  EXPECT_EQ(run.dtype(), DType::F32);
  c.parallel.schedule = "interleaved";
  EXPECT_THROW(RunLayout(c, GridDims{}, Coord{}), UserError);
}

TEST(RunLayout, ABatchThatDoesNotSplitIsRefused) {
  const Config c = small(1, 1, 2, 7);  // config validation reports this first, as a UserError
  EXPECT_THROW(RunLayout(c, GridDims{}, Coord{}), InternalError);
  EXPECT_THROW(RunLayout(small(1, 1, 2, 8), GridDims{1, 2, 1}, Coord{0, 2, 0}), InternalError);
}

// One rank, each ZeRO-free placement: the buffers a Trainer allocates (measured from the buffers
// themselves) are the memory model's.
TEST(RunLayout, TrainerAllocatesWhatTheMemoryModelCounts) {
  test::ensure_mpi();
  for (const char* arch : {"gpt2", "llama"})
    for (const char* rc : {"none", "selective", "full"}) {
      Config c = small(1, 1, 2, 6);
      c.train.recompute = rc;
      c.model.arch = arch;
      if (c.model.llama()) c.model.n_kv_head = 2, c.model.ffn_hidden = 40;
      auto pc = make_parallel_ctx(Grid(1, 1, 1), MPI_COMM_SELF);
      Trainer t(c, *pc, [](int64_t, int rows, int32_t* in, int32_t* tg) {
        for (int i = 0; i < rows * 8; ++i) in[i] = tg[i] = i % 97;
      });
      const RankMemory mem = t.run_layout().memory(t.backend().traits());
      const MemoryReport got = t.optimizer().memory();
      SCOPED_TRACE(std::string(arch) + " " + rc);
      EXPECT_EQ(got.params, mem.master_params + mem.compute_weights);
      EXPECT_EQ(got.grads, mem.grads);
      EXPECT_EQ(got.optimizer, mem.optimizer);
      EXPECT_EQ(got.activations, mem.activations + mem.scratch + mem.logits);
      EXPECT_EQ(got.grad_buckets, mem.grad_buckets);
      EXPECT_EQ(got.param_buckets, mem.param_gather);
    }
}

// Interleaved 1F1B (pp 2, v 2, 4 micro-batches): each chunk's slots are its in-flight bound
// in the schedule, the arenas hold them chunk by chunk (the embedding's tokens on stage 0's
// chunk 0, the head's gradient on stage 1's chunk 1), the pipeline buffers follow the chunks
// that send, and a GPTStage of each stage (built on one process: allocation needs no peers)
// allocates exactly what the model counts.
TEST(RunLayout, VirtualStagesCountSlotsPerChunk) {
  test::ensure_mpi();
  for (const char* rc : {"none", "full"})
    for (int pp = 0; pp < 2; ++pp) {
      Config c = small(1, 2, 2, 8);  // 4 layers: chunk c of stage s holds layer 2c + s
      c.parallel.virtual_stages = 2;
      c.train.recompute = rc;
      const RunLayout run(c, GridDims{1, 2, 1}, Coord{0, pp, 0});
      SCOPED_TRACE(std::string(rc) + " stage " + std::to_string(pp));
      ASSERT_EQ(run.microbatches(), 4);
      const Schedule s = make_schedule(ScheduleKind::OneFOneB, 2, pp, 4, 2);
      // Hand counts of the lists in tests/pipeline/test_schedule_interleaved.cpp: stage 0
      // forwards micro-batches 0-3 of chunk 0 before the first backward of chunk 0 and keeps two
      // of chunk 1; stage 1 forwards three of chunk 0 before B(0, 0) and runs chunk 1 as F, B.
      const std::vector<int> want = pp == 0 ? std::vector<int>{4, 2} : std::vector<int>{3, 1};
      EXPECT_EQ(run.chunk_slots(), want);
      for (int ch = 0; ch < 2; ++ch) EXPECT_EQ(run.chunk_slots()[size_t(ch)], max_in_flight(s, ch));
      EXPECT_EQ(run.slots(), want[0] + want[1]);
      EXPECT_EQ(run.params().chunks().size(), 2u);
      EXPECT_EQ(run.params().chunks()[1].first_layer, 2 + pp);
      const auto cpu = make_cpu_backend();
      const RankMemory mem = run.memory(cpu->traits());
      ASSERT_EQ(mem.arenas.slots.size(), size_t(run.slots()));
      for (size_t i = 0; i < mem.arenas.slots.size(); ++i) {
        const StageArenas::Slot& o = mem.arenas.slots[i];
        EXPECT_EQ(o.chunk, int(i) < want[0] ? 0 : 1);
        EXPECT_EQ(o.xs.size(), 2u);  // one layer per chunk: its input and output
        EXPECT_EQ(o.tokens != 0, pp == 0 && o.chunk == 0);  // offsets follow the xs: never 0
        EXPECT_EQ(o.dfinal != 0, pp == 1 && o.chunk == 1);
      }
      // Stage 0 sends input gradients from chunk 1 (global chunk 2) only, stage 1 from both;
      // both receive output gradients (stage 1's chunk 0 from stage 0's chunk 1).
      EXPECT_EQ(mem.sent_grads, pp == 0 ? want[1] : want[0] + want[1]);
      EXPECT_EQ(mem.recv_grads, 1);
      auto pc = make_parallel_ctx(Grid(1, 1, 1), MPI_COMM_SELF);
      GPTStage stage(run, mem, *pc, *cpu);
      EXPECT_EQ(stage.activation_bytes(), mem.activations + mem.scratch + mem.logits);
      EXPECT_EQ(stage.param_bytes(), mem.master_params);
      EXPECT_EQ(stage.grad_bytes(), mem.grads);
    }
}

// Sequence parallelism on the middle stage of pp 3 (one layer), tp 2, N = 16 rows, Ns = 8, C 32,
// fp32: per slot the layer input and output shrink by (N - Ns) C 4 bytes each, and the layer's
// kept activations by (N - Ns) (3 C 4 + s 4) bytes (ln1, res2, ln2 and the norms' s row
// statistics: 4 for LayerNorm, 2 for RMSNorm); the scratch loses (N - Ns) C 4 of dres2 and of
// each ping-pong gradient and gains an (Ns, C) shard and the (4, C) fp32 norm gradients; the
// pipeline buffers carry (Ns, C). Every size here is a multiple of 64 bytes, so the arenas'
// rounding adds nothing.
TEST(RunLayout, SequenceParallelShrinksTheNormAndResidualActivations) {
  for (const char* arch : {"gpt2", "llama"}) {
    Config c = small(2, 3, 2, 12);
    c.model.arch = arch;
    if (c.model.llama()) c.model.n_kv_head = 2, c.model.ffn_hidden = 64;
    Config s = c;
    s.parallel.sequence_parallel = true;
    SCOPED_TRACE(arch);
    const RunLayout off(c, GridDims{2, 3, 2}, Coord{0, 1, 1}),
        on(s, GridDims{2, 3, 2}, Coord{0, 1, 1});
    EXPECT_FALSE(off.dims().sp);
    EXPECT_TRUE(on.sequence_parallel());
    const size_t N = 16, Ns = 8, C = 32, L = 1, stats = c.model.llama() ? 2 : 4;
    EXPECT_EQ(size_t(on.dims().Ns()), Ns);
    EXPECT_EQ(size_t(off.dims().Ns()), N);
    const RankMemory a = off.memory(DeviceTraits{}), b = on.memory(DeviceTraits{});
    const size_t slots = size_t(on.slots());
    ASSERT_EQ(size_t(off.slots()), slots);
    const size_t layer = (N - Ns) * (3 * C * 4 + stats * 4);
    EXPECT_EQ(a.activations - b.activations, slots * ((L + 1) * (N - Ns) * C * 4 + L * layer));
    EXPECT_EQ(int64_t(b.scratch) - int64_t(a.scratch),
              -3 * int64_t((N - Ns) * C * 4) + int64_t(Ns * C * 4 + 4 * C * 4));
    EXPECT_EQ(b.pipeline, uint64_t(b.sent_grads + b.recv_grads) * Ns * C * 4);
    EXPECT_EQ(a.pipeline, 2 * b.pipeline);
    EXPECT_EQ(b.grads, a.grads);  // parameters and gradients are unchanged
  }
}

// The llama block's buffers: a q|k|v of (n_head + 2 n_kv_head) heads, [gate | up] of 2F, no
// LayerNorm means, and the RoPE tables in the scratch.
TEST(RunLayout, LlamaBlockShapes) {
  Config c = small(2, 1, 2, 8);
  c.model.arch = "llama";
  c.model.n_kv_head = 2, c.model.ffn_hidden = 40;
  const RunLayout run(c, GridDims{2, 1, 2}, Coord{0, 0, 1});
  const BlockDims& d = run.dims();
  EXPECT_TRUE(d.gated);
  EXPECT_EQ(d.NH, 2);
  EXPECT_EQ(d.KV(), 1);
  EXPECT_EQ(d.D(), 8);
  EXPECT_EQ(d.QKVl(), (2 + 2 * 1) * 8);
  EXPECT_EQ(d.Hl(), 20);
  EXPECT_EQ(d.FCl(), 40);
  const ActFormat f = act_format(DeviceTraits{}, d);
  BlockDims g = d;  // the same dims as a gpt2 block: only the family's buffers differ
  g.gated = false;
  const size_t n = size_t(d.N());
  // gpt2 keeps 2 means and an (N, Hl) fch; llama an (N, 2Hl) fch and no means.
  EXPECT_EQ(d.acts_bytes(f, true), g.acts_bytes(f, true) - 2 * n * 4 + n * size_t(d.Hl()) * 4);
  const size_t tables = 2 * size_t(d.T) * size_t(d.D() / 2) * 4;
  EXPECT_EQ(BlockScratch::bytes(d, f), BlockScratch::bytes(g, f) + n * size_t(d.Hl()) * 4 + tables);
}

}  // namespace
}  // namespace loom
