// ZeroOptimizer: AdamW over the rank's flat parameter buffer with ZeRO sharding over the
// data-parallel group. Stage 0: everything replicated. Stage 1: AdamW moments exist only for
// this rank's contiguous shard of the flat buffer; gradients are all-reduced, each rank
// updates its shard, parameters are all-gathered. Stage 2: gradients too are kept only for the
// shard: each layer's gradients are reduced to their owners right after that layer's backward,
// every micro-batch, from a one-layer staging buffer. Stage 3: parameters too exist only as the
// shard; each layer's parameters (and the embedding/head tensors) are all-gathered into a
// working buffer right before use in forward and backward.
// With parallel.overlap the same reductions and gathers are started early as non-blocking
// requests and waited for where their results are first needed (docs/overlap.md): stages 0/1
// all-reduce each layer's gradients as the last micro-batch's backward finishes that layer;
// stages 2/3 reduce each layer from one of two staging buffers while the next layer's backward
// fills the other; stage 3 gathers the next layer into a second working buffer while the
// current one computes.
// With expert parallelism (ep > 1) the experts' tensors are sharded over their own group, the
// dp / ep expert replicas that hold the same experts, and the other tensors over the dp group
// (layout/zero_shard.h); every reduction and gather runs on the group of the elements it moves.
#pragma once
#include <map>
#include <vector>

#include "config/config.h"
#include "core/buffer.h"
#include "layout/param_layout.h"
#include "layout/run_layout.h"
#include "layout/zero_shard.h"
#include "model/gpt_stage.h"
#include "parallel/parallel_ctx.h"

namespace loom {

// Elements per data-parallel reduction call of ZeroOptimizer (loom plan models the same calls).
constexpr size_t kZeroBucketElems = size_t(1) << 24;

struct MemoryReport {
  size_t params = 0, grads = 0, optimizer = 0, activations = 0;
  // stage >= 2: staging of one layer's (two with overlap) and the non-layer gradients
  size_t grad_buckets = 0;
  // stage 3: working copies of one layer (two with overlap) and the non-layer tensors
  size_t param_buckets = 0;
};

class ZeroOptimizer {
 public:
  // run: this rank's resolved layout; mem: its buffer sizes (run.memory(be.traits())), which
  // this optimizer allocates; be: the device of every buffer and kernel; the model attached
  // later must use the same one.
  ZeroOptimizer(const RunLayout& run, const RankMemory& mem, const OptimizerConfig& cfg,
                ParallelCtx& pc, Backend& be);

  int stage() const { return stage_; }
  Backend& backend() const { return be_; }
  size_t param_capacity() const { return param_capacity_; }
  // Stages 2, 3 place gradients themselves; stages 0/1 keep the model's buffer and, with
  // overlap, start their reductions from the hooks ({} without overlap).
  GradHooks grad_hooks();
  ParamHooks param_hooks();  // stage 3 places parameters itself; {} otherwise
  // Stage 3 keeps its parameters here; other stages in the model's flat buffer. Either way
  // these two convert between that storage and a whole flat (layout.total()) host copy.
  void set_full_params(const float* full);  // this rank keeps its part (init, load)
  void get_full_params(float* full);        // collective over DP for stage 3
  // Stage 3's parameter shard (backend memory).
  const float* param_shard() const { return static_cast<const float*>(param_shard_.data()); }
  void attach(GPTStage& stage);  // before training
  void zero_grad();
  // After the last micro-batch's backward: finishes the gradient reductions (tied embedding
  // between first and last stage, then DP) and leaves the world's sum of squared gradients
  // (each element counted once) in the step state's norm_sq, in backend memory: nothing is
  // read back. With overlap it waits for the reductions started during backward.
  void reduce_grads_and_norm();
  // Tests the requests in flight (overlap), letting MPI progress them; called between layers.
  void progress();
  // The step's decision in backend memory (cpu::decide_step: global norm, overflow, clipping,
  // AdamW factors), then AdamW (torch arithmetic, decay only on >= 2-D tensors) on this rank's
  // shard, then (stages 1, 2) all-gather of the parameters and the refresh of the model's
  // compute weights. Gradients that overflowed leave every buffer as it was, on the device.
  // in: the step's scalars in backend memory (train/step_feed.h uploads them).
  void step(const cpu::StepInputs* in);
  // The step state as the host sees it (waits for the device): read once per log interval.
  cpu::StepState read_state() const;
  // Resume: updates applied and steps skipped before this process.
  void set_update_counts(int applied, int skipped);
  MemoryReport memory() const;
  // The flat elements whose moments (and ZeRO-2/3 gradients, ZeRO-3 parameters) this rank
  // holds, and where in its local state.
  const ZeroShards& shards() const { return shards_; }
  float* m() { return static_cast<float*>(m_.data()); }
  float* v() { return static_cast<float*>(v_.data()); }
  // A buffer laid out as this rank's state (m(), v(), param_shard(); backend memory) gathered
  // into the whole flat buffer on the host, in `full` (state_gather_elems() floats; only the
  // first layout.total() matter): on every rank (everywhere = true), or only on each group's
  // rank 0 (receives_state(false)); full may be null on the others. A rank that is rank 0 of
  // the experts' group only gets the experts' elements, zeros elsewhere. Stage 0: a copy.
  bool receives_state(bool everywhere) const;
  size_t state_gather_elems() const;
  void gather_state(const float* state, float* full, bool everywhere);

 private:
  cpu::StepState* state() { return static_cast<cpu::StepState*>(state_.data()); }
  using Pending = std::vector<std::pair<Comm*, CommRequest>>;  // requests and their groups
  const float* grads_of(const ShardPiece& p) const;  // the gradient of the piece's element lo
  void reduce_to_owners(size_t begin, size_t end, float* data);
  // Every owner's part of the run [lo, hi) as all_gatherv counts and displacements (relative
  // to lo); returns where this rank's part is in `state`.
  const float* gather_args(const ShardGroup& g, ShardRange run, const float* state,
                           std::vector<int>& counts, std::vector<int>& displs) const;
  // out (end - begin) = flat elements [begin, end), gathered from the owners' `state` buffers
  // (stage 3: the parameter shards; nullptr: out already holds this rank's own parts, the
  // gather is in place) over each group; pending: started, not waited for.
  void gather_range(size_t begin, size_t end, const float* state, float* out,
                    Pending* pending = nullptr);
  void wait_all(Pending& p);
  bool deferred(const ParamSpec& p) const;
  // Index of a global layer among this stage's (all chunks, in order).
  size_t local(int layer) const { return size_t(layout_.local_layer(layer)); }
  // The staging / working buffer of a layer: alternating by layer with overlap, else the one.
  int buf(int layer) const { return overlap_ ? int(local(layer) % 2) : 0; }
  // Overlap: stages 0/1 start the DP all-reduce of [begin, end); stages 2/3 finish the reduce
  // in flight from staging buffer b (add the owned part to the shard, zero the buffer).
  void start_all_reduce(size_t begin, size_t end);
  // The group that sums (and shards) gradients: the expert replicas for the experts' tensors,
  // the replicas otherwise.
  Comm& group(bool expert) { return expert ? pc_.expert_replicas() : pc_.replicas(); }
  void settle(int b);

  const ParamLayout& layout_;
  OptimizerConfig cfg_;
  ParallelCtx& pc_;
  Backend& be_;
  int stage_, dp_;
  bool overlap_;
  bool last_backward_done_ = false;  // the step's last backward ran (zero_grad resets it)
  bool tied_across_stages_;
  ZeroShards shards_;
  size_t param_capacity_;  // elements the model's parameter buffer needs (stages 0-2)
  GPTStage* model_ = nullptr;
  Buffer m_, v_;
  Buffer state_;  // (1) cpu::StepState, backend memory
  cpu::StepRule rule_;
  // Stage 2 only.
  Buffer grad_shard_;      // (shard size) reduced gradients of the shard
  Buffer layer_stage_[2];  // one layer's gradients, reused by every layer ([1]: overlap)
  Buffer other_stage_;     // embeddings, final norm, head: reduced after each micro-batch
  std::vector<size_t> layer_begin_, layer_end_;  // flat range of each local layer
  std::map<size_t, size_t> other_offset_;        // tensor's flat offset -> offset in other_stage_
  // Stage 3 only.
  Buffer param_shard_;    // (shard size) this rank's parameters
  Buffer layer_work_[2];  // one layer's gathered parameters ([1]: overlap)
  Buffer other_work_;     // the non-layer tensors, gathered
  // Overlap: requests in flight. Stages 0/1: the DP all-reduces of the step. Stages 2/3: per
  // staging buffer, the reduce of the layer it holds; stage 3, per working buffer, the gather of
  // the layer announced by prefetch.
  Pending reduces_;
  struct InFlight {
    int layer = -1;  // -1: nothing in flight
    Pending reqs;
  };
  InFlight staged_[2], fetched_[2];
};

}  // namespace loom
