// Memory model: ZeRO-sharded buffers and activation arenas, counted as loom allocates them.
#include "plan/memory_model.h"

#include "layout/stage_memory.h"
#include "layout/zero_shard.h"

namespace loom::plan {

uint64_t activation_bytes(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                          int slots) {
  const ModelConfig& m = pm.model;
  StageShapeSpec spec;
  spec.dims = BlockDims{c.micro_batch, m.seq_len, m.d_model, m.n_head / c.tp, c.tp};
  spec.layers = sh.num_layers;
  spec.slots = slots;
  spec.recompute = c.recompute;
  spec.first = sh.first;
  spec.last = sh.last;
  spec.vocab_local = sh.vocab_local;
  return uint64_t(plan_stage_arenas(spec, pm.traits()).bytes());
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
  if (!sh.first) r.pipeline += uint64_t(slots) * NC;      // gradients sent back, one per slot
  if (!sh.last) r.pipeline += (pm.overlap ? 2 : 1) * NC;  // received output gradient(s)
  r.reserved = reserved;
  r.exact = pm.exact_backend();
  return r;
}

}  // namespace loom::plan
