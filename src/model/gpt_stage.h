// GPTStage: the part of a GPT-2 model that one rank runs (its pipeline stage, its TP shard):
// parameters and gradients as flat buffers, activation slots for in-flight micro-batches
// (allocated once), and explicit forward/backward of one micro-batch.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "model/block.h"
#include "model/param_layout.h"
#include "parallel/parallel_ctx.h"

namespace loom {

// Where gradients go. By default one flat buffer shaped like the parameters (grads()). A sharded
// optimizer (ZeRO-2) instead places each tensor's gradient itself and takes them over after
// each layer's backward and after each micro-batch's backward, every micro-batch.
struct GradHooks {
  std::function<float*(const ParamSpec&)> where;  // storage of each tensor's gradient
  std::function<void(int layer)> layer_done;      // global layer index; its grads are final
  std::function<void()> backward_done;            // end of one micro-batch's backward
};

// Where parameters live. By default one flat buffer (params()). ZeRO-3 keeps only a shard and
// gathers each layer's parameters (layer >= 0), or the embedding/final-norm/head tensors
// (layer -1), into working buffers right before use and releases them after.
struct ParamHooks {
  std::function<float*(const ParamSpec&)> where;  // working copy of each tensor
  std::function<void(int layer)> gather;
  std::function<void(int layer)> release;
};

// Activation recomputation (train.recompute): none keeps every layer's activations per
// in-flight micro-batch; selective drops the attention probabilities (B, NH, T, T) and
// recomputes them from q, k in backward; full keeps only each layer's input and re-runs the
// layer's forward before its backward.
enum class Recompute { None, Selective, Full };
Recompute parse_recompute(const std::string& mode);

class GPTStage {
 public:
  // micro_batch: sequences per micro-batch; num_slots: micro-batches in flight at once;
  // param_capacity >= layout.total(): the flat parameter buffer is padded to it (ZeRO shards).
  GPTStage(const ModelConfig& m, const ParamLayout& layout, int micro_batch, int num_slots,
           ParallelCtx& pc, size_t param_capacity = 0, GradHooks hooks = {},
           ParamHooks param_hooks = {}, Recompute recompute = Recompute::None);

  const ParamLayout& layout() const { return layout_; }
  float* params() { return params_.data ? params_.f32() : nullptr; }  // default placement only
  float* grads() { return grads_.data ? grads_.f32() : nullptr; }  // default placement only
  size_t num_params() const { return layout_.total(); }
  int tokens_per_micro_batch() const { return dims_.N(); }
  int d_model() const { return dims_.C; }
  size_t activation_bytes() const { return acts_.bytes() + scratch_.bytes(); }
  size_t param_bytes() const { return params_buf_.bytes(); }
  size_t grad_bytes() const { return grads_buf_.bytes(); }  // 0 with custom placement

  // (N, C) input of the stage for `slot`: the caller fills it before forward on stages > 0.
  float* input(int slot) { return slots_[size_t(slot)].xs.front(); }
  // (N, C) output of the stage for `slot` after forward (stages < last).
  float* output(int slot) { return slots_[size_t(slot)].xs.back(); }

  // Forward of one micro-batch. First stage: tokens (N) are embedded; others read input(slot).
  // Last stage: computes the logits; with targets (N) also the loss, whose sum is added to
  // loss_sum(); with dloss > 0 it already back-propagates through the head with that per-token
  // loss weight (training), so only the head's input gradient is kept, never the logits.
  // With dloss == 0 (eval) or no targets (generation) the logits stay readable in logits().
  void forward(int slot, const int32_t* tokens, const int32_t* targets, float dloss);
  // (N, Vl) this rank's vocab shard of the last forward's logits (last stage, dloss == 0).
  const float* logits() const { return logits_; }

  // Backward of one micro-batch. dout (N, C) is the gradient of the stage output (ignored on
  // the last stage, which kept its own). dinput (N, C) receives the gradient of the stage input
  // (stages > 0; nullptr on the first stage, which back-propagates into the embeddings).
  void backward(int slot, const float* dout, float* dinput);

  double loss_sum() const { return loss_sum_; }
  void reset_loss() { loss_sum_ = 0; }
  void zero_grads() { grads_buf_.zero(); }  // default placement (hooks zero their own)

 private:
  struct Slot {
    std::vector<float*> xs;         // L+1 (N, C): input of layer l, xs[L] the stage output
    std::vector<BlockActs> layers;  // L
    int32_t* tokens = nullptr;      // (N) first stage, for the embedding backward
    float* dfinal = nullptr;        // (N, C) last stage: gradient of xs[L]
  };
  BlockWeights weights_at(const std::function<float*(const ParamSpec&)>& at, int layer) const;
  float* grad(const std::string& name) const { return hooks_.where(layout_.get(name)); }
  float* param(const std::string& name) const { return phooks_.where(layout_.get(name)); }
  void gather(int layer) { if (phooks_.gather) phooks_.gather(layer); }
  void release(int layer) { if (phooks_.release) phooks_.release(layer); }
  void head(Slot& s, const int32_t* targets, float dloss);
  void recompute(Slot& s, int layer);

  const ModelConfig m_;
  const ParamLayout layout_;
  ParallelCtx& pc_;
  BlockDims dims_;
  GradHooks hooks_;
  ParamHooks phooks_;
  Recompute recompute_;
  float* recompute_out_ = nullptr;  // (N, C) full recompute: the re-run layer's output
  Buffer params_buf_, grads_buf_;
  Tensor params_, grads_;
  std::vector<BlockWeights> w_, g_;
  Arena acts_, scratch_;
  std::vector<Slot> slots_;
  BlockScratch bs_;
  // Head scratch (last stage) and backward ping-pong buffers.
  float *lnf_ = nullptr, *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr, *logits_ = nullptr;
  float *maxv_ = nullptr, *sums_ = nullptr, *losses_ = nullptr, *dlnf_ = nullptr;
  float* lmax_ = nullptr;      // (N) this TP rank's row max, before the MAX all-reduce
  float* cls_work_ = nullptr;  // classifier_work_floats(N, Vl): per-chunk softmax statistics
  float *dbuf_[2] = {nullptr, nullptr};
  double loss_sum_ = 0;
};

}  // namespace loom
