// Memory model: ZeRO-sharded parameter/gradient/optimizer buffers and activation arenas, counted
// the way ZeroOptimizer, GPTStage and PipelineExecutor allocate them.
#include "plan/memory_model.h"

#include "model/block.h"
#include "optim/zero.h"

namespace loom::plan {

namespace {
uint64_t a64(uint64_t bytes) { return (bytes + 63) / 64 * 64; }  // Arena::reserve alignment
}  // namespace

uint64_t activation_bytes(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                          int slots) {
  const ModelConfig& m = pm.model;
  const BlockDims d{c.micro_batch, m.seq_len, m.d_model, m.n_head / c.tp, c.tp};
  const uint64_t N = uint64_t(d.N()), C = uint64_t(d.C), L = uint64_t(sh.num_layers);
  const uint64_t e = uint64_t(pm.prec.act);
  const uint64_t att = uint64_t(d.B) * uint64_t(d.NH) * uint64_t(d.T) * uint64_t(d.T);
  const uint64_t layer = d.acts_floats();  // one BlockActs, in elements

  // Per micro-batch slot: each layer's input and the stage output, each layer's BlockActs,
  // the first stage's tokens (int32), the last stage's gradient of the stage output.
  uint64_t per_slot = (L + 1) * a64(N * C * e);
  if (c.recompute == Recompute::None) per_slot += L * a64(layer * e);
  if (c.recompute == Recompute::Selective) per_slot += L * a64((layer - att) * e);
  if (sh.first) per_slot += a64(N * 4);
  if (sh.last) per_slot += a64(N * C * e);

  // Shared scratch: block backward scratch, two ping-pong gradients, the head (last stage:
  // final norm output and gradient, 7 row statistics, the local logits).
  uint64_t scratch = a64(BlockScratch::floats(d) * e) + 2 * a64(N * C * e);
  if (sh.last) scratch += a64((2 * N * C + 7 * N + N * uint64_t(sh.vocab_local)) * e);
  if (c.recompute == Recompute::Selective) scratch += a64(att * e);  // one layer recomputed
  if (c.recompute == Recompute::Full) scratch += a64(layer * e);     // one layer recomputed
  return uint64_t(slots) * per_slot + scratch;
}

MemoryEstimate stage_memory(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                            int microbatches, uint64_t reserved, int dp_rank) {
  const Precision& p = pm.prec;
  const uint64_t total = sh.total;
  const uint64_t shard = zero_shard_size(total, c.dp);
  MemoryEstimate r;
  // The parameter buffer is padded to dp * shard at every stage (ZeroOptimizer::param_capacity);
  // stage 3 keeps only the shard and gathers one layer (plus the non-layer tensors) at a time.
  r.params = (c.zero < 3 ? uint64_t(c.dp) * shard : shard) * uint64_t(p.param);
  r.grads = (c.zero < 2 ? total : shard) * uint64_t(p.grad);
  if (c.zero >= 2) r.grad_buckets = (sh.widest_layer + sh.other) * uint64_t(p.grad);
  if (c.zero >= 3) r.param_gather = (sh.widest_layer + sh.other) * uint64_t(p.param);
  uint64_t state = total;
  if (c.zero > 0) {
    ShardRange s = zero_shard(total, c.dp, dp_rank);
    state = s.hi - s.lo;
  }
  r.optimizer = state * uint64_t(2 * p.moment + p.master);

  const int slots = slots_of(pm.schedule, c.pp, sh.stage, microbatches);
  r.activations = activation_bytes(pm, c, sh, slots);
  const uint64_t NC = uint64_t(c.micro_batch) * uint64_t(pm.model.seq_len) *
                      uint64_t(pm.model.d_model) * uint64_t(p.act);
  if (!sh.first) r.pipeline += uint64_t(slots) * NC;  // gradients sent back, one per slot
  if (!sh.last) r.pipeline += NC;                      // the received output gradient
  r.reserved = reserved;
  r.exact = pm.exact_backend() && c.zero <= 2 && c.recompute == Recompute::None;
  return r;
}

}  // namespace loom::plan
