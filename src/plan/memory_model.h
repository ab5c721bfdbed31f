// Per-rank memory of a candidate layout: the memory model loom allocates from, in plan's terms.
#pragma once
#include <cstdint>
#include <vector>

#include "plan/layout_model.h"

namespace loom::plan {

// Bytes on one rank. params ... activations and param_gather (param_buckets) are the fields of
// loom's MemoryReport.
struct MemoryEstimate {
  uint64_t params = 0;        // parameter buffers: fp32 master (ZeRO padding included; stage 3:
                              // the shard) and, in bf16/fp16, the compute copy
  uint64_t grads = 0;         // gradient buffer (stage >= 2: the reduced shard)
  uint64_t grad_buckets = 0;  // stage >= 2: one layer's staging buffer + the non-layer tensors
  uint64_t optimizer = 0;     // AdamW moments
  uint64_t activations = 0;   // GPTStage::activation_bytes(): slots x per-slot + scratch
  uint64_t pipeline = 0;      // executor buffers (received output gradients, the outgoing ones,
                              // device send staging) and the step's uploaded inputs
  uint64_t param_gather = 0;  // stage 3: working copies of one layer + the non-layer tensors
  uint64_t reserved = 0;      // outside loom (cluster's reserved_gib)
  bool exact = false;         // reproduces loom's allocations byte for byte (cpu backend)

  uint64_t total() const {
    return params + grads + grad_buckets + optimizer + activations + pipeline + param_gather +
           reserved;
  }
};

// Memory of the rank at (stage, dp_rank) of `c`: dp_rank is its index among the dp x cp replicas
// (dp * cp + cp_rank; 0 holds the largest ZeRO shard). `sh` must hold c.v chunks.
MemoryEstimate stage_memory(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                            int microbatches, uint64_t reserved, int dp_rank = 0);
// The same with the stage's slots per chunk given (layout/schedule.h's chunk_slots of the
// candidate's schedule, pp, stage, micro-batches and v): the planner computes them once per
// micro-batch count, not per ZeRO stage and recompute mode.
MemoryEstimate stage_memory(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                            const std::vector<int>& slots, int microbatches, uint64_t reserved,
                            int dp_rank = 0);
// ... and with the stage's arenas given (stage_arenas of the same candidate, stage and slots;
// they do not depend on the ZeRO stage).
StageArenas stage_arenas(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                         const std::vector<int>& slots);
MemoryEstimate stage_memory(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                            const std::vector<int>& slots, int microbatches, uint64_t reserved,
                            int dp_rank, const StageArenas& arenas);

// GPTStage::activation_bytes() for `slots` micro-batches in flight: the stage's arenas as
// layout/stage_memory.h plans them for the modelled device (the same function GPTStage uses).
uint64_t activation_bytes(const PlanModel& pm, const Candidate& c, const StageShape& sh, int slots);

}  // namespace loom::plan
