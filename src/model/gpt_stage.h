// GPTStage: the part of a GPT-2 model that one rank runs (its pipeline stage, its TP shard):
// parameters and gradients as flat fp32 buffers, activation slots for in-flight micro-batches
// of each of its chunks (virtual stages; allocated once), and explicit forward/backward of one
// micro-batch through one chunk, on one Backend's device.
// With a low-precision act dtype (cuda bf16/fp16) the kernels read a copy of the parameters in
// that dtype (the compute weights), refreshed from the fp32 master weights after each update.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "layout/param_layout.h"
#include "layout/run_layout.h"
#include "layout/stage_memory.h"
#include "model/block.h"
#include "parallel/parallel_ctx.h"

namespace loom {

// Where gradients go. By default one flat buffer shaped like the parameters (grads()). A sharded
// optimizer (ZeRO-2) instead places each tensor's gradient itself and takes them over after
// each layer's backward and after each micro-batch's backward, every micro-batch. Any hook may
// be empty; with `where` empty the default buffer is used and the other hooks still run (ZeRO
// 0/1 with parallel.overlap start their reductions from layer_done of the last micro-batch).
// `last`: for layer_done, the backward is the last micro-batch's of the layer's chunk this step
// (the executor says so), after which the layer's gradients are final; for backward_done, it is
// the step's last backward on this rank, after which all its gradients are final.
struct GradHooks {
  std::function<float*(const ParamSpec&)> where;  // storage of each tensor's gradient
  std::function<void(int layer)> layer_begin;     // right before a layer's backward writes them
  std::function<void(int layer, bool last)> layer_done;  // global layer index: its grads are in
  std::function<void(bool last)> backward_done;          // end of one micro-batch's backward
};

// Where parameters live. By default one flat buffer (params()). ZeRO-3 keeps only a shard and
// gathers each layer's parameters (layer >= 0), or the embedding/final-norm/head tensors
// (layer -1), into working buffers right before use and releases them after.
// With parallel.overlap, prefetch(layer) announces the layer the pass gathers next, called
// right after the current layer's gather and before its compute, so its gather may run during
// that compute (in forward order in forward, reverse order in backward).
struct ParamHooks {
  std::function<float*(const ParamSpec&)> where;  // working copy of each tensor
  std::function<void(int layer)> gather;
  std::function<void(int layer)> release;
  std::function<void(int layer)> prefetch;
};

class GPTStage {
 public:
  // run: this rank's resolved layout (dims, slots, recompute, its ParamLayout); mem: the buffer
  // sizes of the memory model (run.memory(be.traits())): the flat parameter buffer holds
  // mem.param_elems (padded for ZeRO's shards) and the arenas are mem.arenas. Every buffer lives
  // on be's device.
  GPTStage(const RunLayout& run, const RankMemory& mem, ParallelCtx& pc, Backend& be,
           GradHooks hooks = {}, ParamHooks param_hooks = {});

  Backend& backend() const { return be_; }
  const ParamLayout& layout() const { return layout_; }
  // fp32 master parameters and gradients (device memory of the backend).
  float* params() { return static_cast<float*>(params_buf_.data()); }  // default placement only
  float* grads() { return static_cast<float*>(grads_buf_.data()); }    // default placement only
  int tokens_per_micro_batch() const { return dims_.N(); }
  int d_model() const { return dims_.C; }
  // Elements of the stage input/output and of their gradients (act dtype): (Ns, C), this rank's
  // rows with sequence parallelism, else (N, C).
  size_t boundary_elems() const { return size_t(dims_.Ns()) * size_t(dims_.C); }
  size_t activation_bytes() const { return acts_.bytes() + scratch_.bytes(); }
  size_t param_bytes() const { return params_buf_.bytes(); }
  size_t grad_bytes() const { return grads_buf_.bytes(); }         // 0 with custom placement
  size_t compute_weight_bytes() const { return cw_buf_.bytes(); }  // 0 unless low precision
  // Re-derives the compute weights from the fp32 parameters (after init, load and every
  // optimizer step); nothing to do when the kernels read the fp32 parameters themselves.
  void refresh_compute_weights();

  // (Ns, C) input of chunk `chunk` for `slot` (act dtype; boundary_elems()): filled by the
  // caller before forward on all but the model's first chunk.
  void* input(int chunk, int slot) { return slot_of(chunk, slot).xs.front(); }
  // (Ns, C) output of the chunk for `slot` after forward (all but the model's last chunk).
  void* output(int chunk, int slot) { return slot_of(chunk, slot).xs.back(); }
  void* input(int slot) { return input(0, slot); }  // one chunk per stage
  void* output(int slot) { return output(0, slot); }
  // The model's first chunk (embedding) and last chunk (head) among this stage's.
  bool embeds(int chunk) const { return layout_.first_stage() && chunk == 0; }
  bool has_head(int chunk) const {
    return layout_.last_stage() && chunk + 1 == layout_.virtual_stages();
  }

  // Forward of one micro-batch. tokens and targets (N) are in backend memory.
  // First stage: tokens (N) are embedded; others read input(slot).
  // Last stage: computes the logits; with targets (N) also the loss, whose sum is added to the
  // device accumulator loss_acc() (no host sync); with dloss > 0 it already back-propagates through
  // the head with that per-token loss weight (training), so only the head's input gradient is kept,
  // never the logits. With dloss == 0 (eval) or no targets (generation) the logits stay readable in
  // logits().
  void forward(int slot, const int32_t* tokens, const int32_t* targets, float dloss);
  // ... of chunk `chunk` (virtual stage) of this stage; the above is chunk 0's.
  void forward(int chunk, int slot, const int32_t* tokens, const int32_t* targets, float dloss);
  // host (N, Vl) fp32 = this rank's vocab shard of the last forward's logits (last stage,
  // dloss == 0).
  void logits_to_host(float* out) const;

  // Backward of one micro-batch. dout (Ns, C) is the gradient of the stage output (ignored on
  // the last stage, which kept its own). dinput (Ns, C) receives the gradient of the stage input
  // (stages > 0; nullptr on the first stage, which back-propagates into the embeddings). Both in
  // the act dtype on the backend's device.
  // last: this is the step's last micro-batch (passed on to the gradient hooks).
  void backward(int slot, const void* dout, void* dinput, bool last = true);
  // ... of chunk `chunk`: last says it is the chunk's last micro-batch this step (its layers'
  // gradients are final: GradHooks::layer_done), step_last that it is the step's last backward
  // on this stage (GradHooks::backward_done).
  void backward(int chunk, int slot, const void* dout, void* dinput, bool last, bool step_last);

  // Called between layers in forward and backward: lets non-blocking communication started by
  // the optimizer or the executor progress (MPI without a progress thread moves data only
  // inside MPI calls). Empty: nothing.
  void set_progress(std::function<void()> poll) { progress_ = std::move(poll); }

  // The summed per-token loss since reset_loss(): one double of backend memory (it stays on the
  // device; loss_sum() reads it back and waits for the device).
  double* loss_acc() { return static_cast<double*>(loss_acc_.data()); }
  double loss_sum() const;
  void reset_loss() { be_.zero(loss_acc_.data(), loss_acc_.bytes()); }
  // Mixture of Experts, since reset_moe_stats(): the step's load-balancing and z-loss values
  // (this stage's layers, this rank's sequences), and per local layer the assignments each
  // expert got (before dropping; (layers, E)) and the assignments dropped; and per local layer
  // the last micro-batch's routing (N*k: chosen experts; 1 kept, 0 dropped).
  void reset_moe_stats();
  std::array<double, 2> moe_loss_sums() const;
  const std::vector<int64_t>& moe_counts() const { return moe_counts_; }
  const std::vector<int64_t>& moe_dropped() const { return moe_dropped_; }
  const std::vector<std::vector<int32_t>>& moe_choices() const { return moe_choices_; }
  const std::vector<std::vector<int32_t>>& moe_kept() const { return moe_kept_; }
  void zero_grads() { be_.zero(grads_buf_.data(), grads_buf_.bytes()); }  // default placement

 private:
  struct Slot {
    std::vector<void*> xs;          // L+1 (Ns, C): input of layer l, xs[L] the stage output
    std::vector<BlockActs> layers;  // L
    int32_t* tokens = nullptr;      // (N) first stage, for the embedding backward
    void* dfinal = nullptr;         // (Ns, C) last stage: gradient of xs[L]
  };
  Slot& slot_of(int chunk, int slot);
  BlockWeights weights_at(int layer) const;
  BlockGrads grads_at(int layer) const;
  float* grad(const std::string& name) const { return hooks_.where(layout_.get(name)); }
  // The kernels' copy of a tensor: the fp32 parameter, or its act-dtype compute weight.
  const void* cw(const ParamSpec& p) const;
  const void* cw(const std::string& name) const { return cw(layout_.get(name)); }
  void gather(int layer) {
    if (phooks_.gather) phooks_.gather(layer);
  }
  void release(int layer) {
    if (phooks_.release) phooks_.release(layer);
  }
  void prefetch(int layer) {
    if (phooks_.prefetch) phooks_.prefetch(layer);
  }
  void poll() {
    if (progress_) progress_();
  }
  void head(Slot& s, const int32_t* targets, float dloss);
  template <typename F>
  void each_cp_chunk(F f) const;  // f(row, first position, rows) per sequence chunk (cp > 1)
  void embed_forward(void* out, const int32_t* tokens, const void* wpe);
  void embed_backward(const void* dout, const int32_t* tokens, float* dwpe);
  void recompute(Slot& s, int layer, int w);  // layer of the slot's chunk, w its local index

  const RunLayout run_;
  const ModelConfig& m_;       // run_.model()
  const ParamLayout& layout_;  // run_.params()
  ParallelCtx& pc_;
  Backend& be_;
  ActFormat fmt_;
  BlockDims dims_;
  GradHooks hooks_;
  ParamHooks phooks_;
  std::function<void()> progress_;
  void* recompute_out_ = nullptr;  // (Ns, C) full recompute: the re-run layer's output
  Buffer params_buf_, grads_buf_;
  Buffer cw_buf_;  // (capacity) act-dtype compute weights (low precision only)
  std::vector<BlockWeights> w_;
  std::vector<BlockGrads> g_;
  Buffer acts_, scratch_;         // the arenas of layout/stage_memory.h
  std::vector<Slot> slots_;       // chunk 0's, then chunk 1's, ...
  std::vector<int> chunk_slot0_;  // index in slots_ of each chunk's first slot, then the total
  BlockScratch bs_;
  HeadScratch head_;                    // last stage
  void* dbuf_[2] = {nullptr, nullptr};  // backward ping-pong gradients (Ns, C), act dtype
  Buffer loss_acc_;                     // (1) double: summed per-token loss
  Buffer moe_loss_;                     // (2) double: the MoE loss terms (MoE only)
  std::vector<int64_t> moe_counts_, moe_dropped_;
  std::vector<std::vector<int32_t>> moe_choices_, moe_kept_;
  void add_moe_counts(const BlockActs& a, int local_layer);
};

}  // namespace loom
