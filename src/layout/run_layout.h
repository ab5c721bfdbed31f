// RunLayout: what one rank's run derives from its Config and its grid coordinate, resolved once
// and handed to the trainer, the model stage, the optimizer, the executor, the device-fit check
// and the console, so that none of them derives it again. loom plan, which searches layouts
// without a Config per candidate, builds the same MemorySpec from its candidate.
#pragma once
#include <vector>

#include "config/config.h"
#include "core/dtype.h"
#include "layout/param_layout.h"
#include "layout/rank_memory.h"
#include "layout/schedule.h"
#include "layout/stage_memory.h"
#include "parallel/grid.h"

namespace loom {

// The size of each axis of the grid.
struct GridDims {
  int dp = 1, pp = 1, tp = 1, cp = 1;
  int world() const { return dp * pp * tp * cp; }
};

// One transformer block on one TP rank of a tp-way split, for micro-batches of micro_batch
// sequences of model m; sp: sequence parallelism (norms and residuals on N/tp rows); cp: context
// parallelism (this rank's seq_len/cp tokens of each sequence).
// ep: expert parallelism (the experts split over ep ranks of the data-parallel group).
BlockDims block_dims(const ModelConfig& m, int micro_batch, int tp, bool sp = false, int cp = 1,
                     int ep = 1);

class RunLayout {
 public:
  // cfg must be valid for `grid` (validate()); coord is the rank's place in it. Throws
  // InternalError when the batch does not split into micro-batches (validate() says so first).
  RunLayout(const Config& cfg, GridDims grid, Coord coord);
  RunLayout(const Config& cfg, const Grid& grid, int rank);
  // One rank running one sequence per forward in fp32 (loom generate): model m, nothing else.
  static RunLayout single_sequence(const ModelConfig& m);

  const ModelConfig& model() const { return model_; }
  GridDims grid() const { return grid_; }
  int dp() const { return grid_.dp; }
  int pp() const { return grid_.pp; }
  int tp() const { return grid_.tp; }
  int cp() const { return grid_.cp; }
  // Ranks holding the same parameters, which sum their gradients and share ZeRO's shards:
  // dp x cp (ParallelCtx::replicas()).
  int replicas() const { return grid_.dp * grid_.cp; }
  int ep() const { return params_.ep(); }  // parallel.ep: ranks splitting the experts
  Coord coord() const { return coord_; }
  bool first_stage() const { return coord_.pp == 0; }
  bool last_stage() const { return coord_.pp == grid_.pp - 1; }

  int micro_batch() const { return micro_batch_; }    // sequences per micro-batch
  int global_batch() const { return global_batch_; }  // sequences per optimizer step
  int microbatches() const { return microbatches_; }  // per step on each data-parallel rank
  ScheduleKind schedule() const { return schedule_; }
  int slots() const { return slots_; }  // micro-batches in flight on this stage (all chunks)
  // parallel.virtual_stages: model chunks on this stage (interleaved 1F1B when > 1).
  int virtual_stages() const { return virtual_stages_; }
  const std::vector<int>& chunk_slots() const { return chunk_slots_; }  // slots of each chunk

  DType dtype() const { return dtype_; }  // train.dtype: the compute dtype on cuda
  Recompute recompute() const { return recompute_; }
  int zero_stage() const { return zero_; }
  bool overlap() const { return overlap_; }
  bool sequence_parallel() const { return dims_.sp; }  // parallel.sequence_parallel
  // The tied embedding lives on both the first and the last stage and is summed between them.
  bool tied_across_stages() const { return model_.tie_embeddings && grid_.pp > 1; }

  const ParamLayout& params() const { return params_; }  // this rank's parameters
  const BlockDims& dims() const { return dims_; }         // one block on this TP rank
  StageShapeSpec stage_spec() const;                      // what the stage's arenas hold
  // What the memory model needs; buffer sizes per part: memory(traits).
  MemorySpec memory_spec() const;
  RankMemory memory(const DeviceTraits& dev) const { return plan_rank_memory(memory_spec(), dev); }

 private:
  ModelConfig model_;
  GridDims grid_;
  Coord coord_;
  int micro_batch_, global_batch_, microbatches_;
  ScheduleKind schedule_;
  int virtual_stages_;
  std::vector<int> chunk_slots_;
  int slots_;
  DType dtype_;
  Recompute recompute_;
  int zero_;
  bool overlap_;
  ParamLayout params_;
  BlockDims dims_;
};

}  // namespace loom
