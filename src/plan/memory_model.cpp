// Memory model: ZeRO-sharded buffers and activation arenas, counted as loom allocates them.
#include "plan/memory_model.h"

#include "kernels/classifier.h"
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

  // Per micro-batch slot: each layer's input and the stage output; each layer's BlockActs
  // (none), or all of it but the attention probabilities (selective), or nothing (full); the
  // first stage's tokens (int32) and the last stage's gradient of the stage output.
  uint64_t per_slot = (L + 1) * a64(N * C * e);
  if (c.recompute == Recompute::None) per_slot += L * a64(d.acts_floats(true) * e);
  if (c.recompute == Recompute::Selective) per_slot += L * a64(d.acts_floats(false) * e);
  if (sh.first) per_slot += a64(N * 4);
  if (sh.last) per_slot += a64(N * C * e);

  // Shared by every slot and layer: the recomputed probabilities (selective), or a whole
  // layer's activations and its re-run output (full).
  uint64_t shared = 0;
  if (c.recompute == Recompute::Selective) shared = a64(att * e);
  if (c.recompute == Recompute::Full) shared = a64(d.acts_floats(true) * e) + a64(N * C * e);

  // Scratch: the block backward's, two ping-pong gradients, and the head (last stage: final
  // norm output and gradient, 7 row statistics, the local logits, classifier chunk statistics).
  uint64_t scratch = a64(BlockScratch::floats(d) * e) + 2 * a64(N * C * e);
  if (sh.last) {
    const uint64_t Vl = uint64_t(sh.vocab_local);
    const uint64_t work = cpu::classifier_work_floats(int(N), int(Vl));
    scratch += a64((2 * N * C + 7 * N + N * Vl + work) * e);
  }
  return uint64_t(slots) * per_slot + shared + scratch;
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
  // With overlap a second layer buffer: one layer's reduce (gather) runs while the next fills.
  const uint64_t layer_bufs = pm.overlap ? 2 : 1;
  if (c.zero >= 2) r.grad_buckets = (layer_bufs * sh.widest_layer + sh.other) * uint64_t(p.grad);
  if (c.zero >= 3) r.param_gather = (layer_bufs * sh.widest_layer + sh.other) * uint64_t(p.param);
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
  if (!sh.last) r.pipeline += (pm.overlap ? 2 : 1) * NC;  // received output gradient(s)
  r.reserved = reserved;
  r.exact = pm.exact_backend();
  return r;
}

}  // namespace loom::plan
