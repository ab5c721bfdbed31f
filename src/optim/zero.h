// ZeroOptimizer: AdamW over the rank's flat parameter buffer with ZeRO sharding over the
// data-parallel group. Stage 0: everything replicated. Stage 1: AdamW moments exist only for
// this rank's contiguous shard of the flat buffer; gradients are all-reduced, each rank
// updates its shard, parameters are all-gathered. Stage 2: gradients too are kept only for the
// shard: each layer's gradients are reduced to their owners right after that layer's backward,
// every micro-batch, from a one-layer staging buffer. Stage 3: parameters too exist only as the
// shard; each layer's parameters (and the embedding/head tensors) are all-gathered into a
// working buffer right before use in forward and backward.
#pragma once
#include <map>
#include <vector>

#include "config/config.h"
#include "core/buffer.h"
#include "model/gpt_stage.h"
#include "model/param_layout.h"
#include "parallel/parallel_ctx.h"

namespace loom {

// Elements [lo, hi) of a flat buffer of `total` elements owned by DP rank `rank`: the buffer is
// padded to dp * shard_size and cut into equal contiguous shards (a tensor may straddle two).
struct ShardRange {
  size_t lo = 0, hi = 0;
};
size_t zero_shard_size(size_t total, int dp);
ShardRange zero_shard(size_t total, int dp, int rank);

struct MemoryReport {
  size_t params = 0, grads = 0, optimizer = 0, activations = 0;
  size_t grad_buckets = 0;   // stage >= 2: staging of one layer's and the non-layer gradients
  size_t param_buckets = 0;  // stage 3: working copies of one layer and the non-layer tensors
};

class ZeroOptimizer {
 public:
  // be: the device of every buffer and kernel (nullptr: the cpu backend); the model attached
  // later must use the same one.
  ZeroOptimizer(const ParamLayout& layout, const Config& cfg, ParallelCtx& pc,
                Backend* be = nullptr);

  int stage() const { return stage_; }
  Backend& backend() const { return be_; }
  size_t param_capacity() const { return size_t(dp_) * shard_size_; }
  GradHooks grad_hooks();            // stages 2, 3 place gradients themselves; {} otherwise
  ParamHooks param_hooks();          // stage 3 places parameters itself; {} otherwise
  // Stage 3 keeps its parameters here; other stages in the model's flat buffer. Either way
  // these two convert between that storage and a whole flat (layout.total()) host copy.
  void set_full_params(const float* full);   // this rank keeps its part (init, load)
  void get_full_params(float* full);         // collective over DP for stage 3
  // Stage 3's parameter shard (backend memory).
  const float* param_shard() const { return static_cast<const float*>(param_shard_.data()); }
  void attach(GPTStage& stage);      // before training
  void zero_grad();
  // After every micro-batch's backward: finishes the gradient reductions (tied embedding
  // between first and last stage, then DP) and returns the global gradient L2 norm, each
  // element counted once.
  double reduce_grads_and_norm();
  // AdamW (torch arithmetic, decay only on >= 2-D tensors) on this rank's shard with gradients
  // scaled by grad_scale, then (stages 1, 2) all-gather of the parameters and the refresh of
  // the model's compute weights.
  void step(double lr, float grad_scale, int step);
  MemoryReport memory() const;
  ShardRange shard() const { return shard_; }  // the range whose moments this rank holds
  float* m() { return static_cast<float*>(m_.data()); }
  float* v() { return static_cast<float*>(v_.data()); }

 private:
  const float* shard_grads() const;  // gradient of element shard_.lo onwards
  void reduce_to_owners(size_t begin, size_t end, float* data);
  void gather_range(size_t begin, size_t end, float* out);  // stage 3: flat range from shards
  bool deferred(const ParamSpec& p) const;

  const ParamLayout& layout_;
  OptimizerConfig cfg_;
  ParallelCtx& pc_;
  Backend& be_;
  int stage_, dp_;
  bool tied_across_stages_;
  size_t shard_size_;
  ShardRange shard_;
  GPTStage* model_ = nullptr;
  Buffer m_, v_;
  // Stage 2 only.
  Buffer grad_shard_;   // (shard size) reduced gradients of the shard
  Buffer layer_stage_;  // one layer's gradients, reused by every layer
  Buffer other_stage_;  // embeddings, final norm, head: reduced after each micro-batch
  std::vector<size_t> layer_begin_, layer_end_;  // flat range of each local layer
  std::map<size_t, size_t> other_offset_;        // tensor's flat offset -> offset in other_stage_
  // Stage 3 only.
  Buffer param_shard_;  // (shard size) this rank's parameters
  Buffer layer_work_;   // one layer's gathered parameters
  Buffer other_work_;   // the non-layer tensors, gathered
};

}  // namespace loom
