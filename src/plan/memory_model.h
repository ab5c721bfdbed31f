// Per-rank memory of a layout: loom's own accounting (ZeroOptimizer::memory(), GPTStage's
// activation arenas, the pipeline executor's p2p buffers) reproduced from the stage shape.
#pragma once
#include <cstdint>

#include "plan/layout_model.h"

namespace loom::plan {

// Bytes on one rank. The first five fields are those of loom's MemoryReport.
struct MemoryEstimate {
  uint64_t params = 0;        // parameter buffer (ZeRO padding included; stage 3: the shard)
  uint64_t grads = 0;         // gradient buffer (stage >= 2: the reduced shard)
  uint64_t grad_buckets = 0;  // stage >= 2: one layer's staging buffer + the non-layer tensors
  uint64_t optimizer = 0;     // AdamW moments (+ fp32 master weights in mixed precision)
  uint64_t activations = 0;   // GPTStage::activation_bytes(): slots x per-slot + scratch
  uint64_t pipeline = 0;      // executor buffers: received output gradients and the outgoing one
  uint64_t param_gather = 0;  // stage 3: one layer + the non-layer tensors gathered whole
  uint64_t reserved = 0;      // outside loom (cluster's reserved_gib)
  bool exact = false;         // every field reproduces loom's allocations byte for byte

  uint64_t total() const {
    return params + grads + grad_buckets + optimizer + activations + pipeline + param_gather +
           reserved;
  }
};

// Memory of the rank at (stage, dp_rank) of `c` (dp_rank 0 holds the largest ZeRO shard).
MemoryEstimate stage_memory(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                            int microbatches, uint64_t reserved, int dp_rank = 0);

// The activation arenas of GPTStage for `slots` micro-batches in flight. Recompute none is
// exactly GPTStage's reservation list (64-byte aligned tensors); selective drops each layer's
// attention probabilities (B, heads, T, T) and recomputes one layer's worth in scratch; full
// keeps only each layer's input and recomputes one whole layer's activations in scratch.
uint64_t activation_bytes(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                          int slots);

}  // namespace loom::plan
