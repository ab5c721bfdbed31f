// Memory model of a candidate: the rank's memory as layout/rank_memory.h counts what loom
// allocates, for the modelled device.
#include "plan/memory_model.h"

#include "layout/run_layout.h"

namespace loom::plan {

namespace {
MemorySpec spec_of(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                   const std::vector<int>& slots, int dp_rank, int microbatches = 1) {
  MemorySpec s;
  s.params = sh;
  s.stage = stage_shape_spec(sh, block_dims(pm.model, c.micro_batch, c.tp, c.sp, c.cp, c.ep), slots,
                             c.recompute);
  s.dp = c.replicas();  // ZeRO shards over the dp x cp ranks holding the same parameters
  s.dp_rank = dp_rank;
  s.zero = c.zero;
  s.ep = c.ep;
  s.overlap = pm.overlap;
  s.microbatches = microbatches;
  return s;
}
}  // namespace

uint64_t activation_bytes(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                          int slots) {
  return uint64_t(plan_stage_arenas(spec_of(pm, c, sh, {slots}, 0).stage, pm.traits()).bytes());
}

MemoryEstimate stage_memory(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                            int microbatches, uint64_t reserved, int dp_rank) {
  return stage_memory(pm, c, sh, chunk_slots(pm.schedule, c.pp, sh.stage, microbatches, c.v),
                      microbatches, reserved, dp_rank);
}

MemoryEstimate stage_memory(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                            const std::vector<int>& slots, int microbatches, uint64_t reserved,
                            int dp_rank) {
  return stage_memory(pm, c, sh, slots, microbatches, reserved, dp_rank,
                      stage_arenas(pm, c, sh, slots));
}

StageArenas stage_arenas(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                         const std::vector<int>& slots) {
  return plan_stage_arenas(spec_of(pm, c, sh, slots, 0).stage, pm.traits());
}

MemoryEstimate stage_memory(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                            const std::vector<int>& slots, int microbatches, uint64_t reserved,
                            int dp_rank, const StageArenas& arenas) {
  const RankMemory mem =
      plan_rank_memory(spec_of(pm, c, sh, slots, dp_rank, microbatches), pm.traits(), arenas);
  MemoryEstimate r;
  r.params = mem.master_params + mem.compute_weights;
  r.grads = mem.grads;
  r.grad_buckets = mem.grad_buckets;
  r.optimizer = mem.optimizer;
  r.activations = mem.activations + mem.scratch + mem.logits;
  r.pipeline = mem.pipeline + mem.step_inputs;
  r.param_gather = mem.param_gather;
  r.reserved = reserved;
  r.exact = pm.exact_backend();
  return r;
}

}  // namespace loom::plan
