// The memory of one rank, part by part: ZeRO's parameter, gradient and moment buffers, the
// stage's activation arenas and the pipeline's transfer buffers. The optimizer, the model stage
// and the executor allocate exactly these sizes; loom plan and the device-fit check report them.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/device_traits.h"
#include "layout/param_layout.h"
#include "layout/stage_memory.h"
#include "layout/zero_shard.h"

namespace loom {

// Element counts of one (pipeline stage, TP rank)'s parameters (every TP rank of a stage holds
// the same number of elements).
struct StageParams {
  int stage = 0, num_layers = 0;  // num_layers: over all chunks
  int chunks = 1;                 // virtual stages (equal chunks of num_layers / chunks)
  bool first = false, last = false;
  uint64_t total = 0;         // ParamLayout::total(): elements of the flat buffer
  uint64_t layer_begin = 0;   // flat offset of the first layer element (layers are contiguous)
  uint64_t layer_elems = 0;   // elements of all transformer layers
  uint64_t widest_layer = 0;  // elements of the largest single layer
  uint64_t other = 0;         // embeddings, final norm, head / tied copy
  uint64_t wte = 0;           // elements of the stage's wte shard (0 when it has none)
  uint64_t expert = 0;        // elements of the experts' tensors (this rank's E/ep experts)
  bool tied_across_stages = false;  // wte here is summed with the other end's (embed group)
  int vocab_local = 0;              // padded vocab rows per TP rank
};
StageParams stage_params(const ParamLayout& layout);

// What the arenas of a stage with parameters p hold: blocks of `dims` on its TP rank, `slots`
// micro-batches in flight, recomputation r.
StageShapeSpec stage_shape_spec(const StageParams& p, const BlockDims& dims, int slots,
                                Recompute r);
// ... with p.chunks chunks of chunk_slots[c] micro-batches in flight each.
StageShapeSpec stage_shape_spec(const StageParams& p, const BlockDims& dims,
                                const std::vector<int>& chunk_slots, Recompute r);

// What the memory of a rank depends on.
struct MemorySpec {
  StageParams params;
  StageShapeSpec stage;
  int dp = 1, dp_rank = 0;  // data-parallel size and this rank's index (its ZeRO shard)
  int ep = 1;               // expert parallelism: the experts' ZeRO group is dp / ep ranks
  int zero = 0;             // optimizer.zero_stage
  bool overlap = false;     // parallel.overlap: second staging, working and receive buffers
  int microbatches = 1;     // per step: the step's inputs (tokens, targets) are uploaded at once
};

// Buffer sizes (elements, then bytes) of one rank. fp32 master parameters, gradients and AdamW
// moments; a copy of the parameters in the act dtype when it is bf16/fp16 (the compute weights);
// ZeRO >= 2 stages gradients through layer buffers, ZeRO-3 gathers parameters into them.
struct RankMemory {
  ZeroSizes zero;                   // the rank's ZeRO shards (layout/zero_shard.h)
  uint64_t param_elems = 0;         // fp32 parameters held: the flat buffer (ZeRO < 3; padded to
                                    // dp * shard with one group) or the shard (ZeRO-3)
  uint64_t grad_elems = 0;          // fp32 gradients: total (ZeRO < 2) or the reduced shard
  int layer_buffers = 0;            // ZeRO >= 2: staging (and ZeRO-3 working) layer buffers, 1 or 2
  uint64_t layer_buffer_elems = 0;  // widest layer
  uint64_t other_buffer_elems = 0;  // embeddings, final norm, head
  int sent_grads = 0;  // pipeline: (N, C) input gradients sent back (slots of chunks but the first)
  int recv_grads = 0;  // pipeline: (N, C) output gradients received (a chunk but the last: 1 or 2)
  // Device pipeline sends (cuda, pp > 1) are staged: (N, C) buffers per direction this stage
  // sends in (slots + 1 each: as many sends as the schedule keeps in flight, and one).
  int staged_sends = 0;
  int send_directions = 0;
  StageArenas arenas;  // activations and scratch (layout/stage_memory.h)

  // Bytes by part (each in the dtype the buffer has).
  uint64_t master_params = 0;    // fp32 parameter buffer
  uint64_t compute_weights = 0;  // act-dtype copy of the parameters (low precision only)
  uint64_t param_gather = 0;     // ZeRO-3: working copies of a layer and the other tensors
  uint64_t grads = 0;
  uint64_t grad_buckets = 0;  // ZeRO >= 2: staging of a layer and the other tensors
  uint64_t optimizer = 0;     // AdamW m and v of the state range
  uint64_t activations = 0;   // the activation arena
  uint64_t scratch = 0;       // the scratch arena without the logits
  uint64_t logits = 0;        // last stage: (N, Vl) in the act dtype, part of the scratch arena
  uint64_t pipeline = 0;      // the executor's gradient buffers and the send staging
  uint64_t step_inputs = 0;   // the step's scalars, tokens and targets (layout/step_inputs.h)

  uint64_t total() const;
  // (label, bytes) of every part above, in order, for messages and tests.
  std::vector<std::pair<std::string, uint64_t>> parts(const std::string& dtype) const;
};
RankMemory plan_rank_memory(const MemorySpec& spec, const DeviceTraits& dev);
// The same with the stage's arenas given (plan_stage_arenas(spec.stage, dev)): loom plan reuses
// them across the ZeRO stages of one candidate.
RankMemory plan_rank_memory(const MemorySpec& spec, const DeviceTraits& dev,
                            const StageArenas& arenas);

}  // namespace loom
