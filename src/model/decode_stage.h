// DecodeStage: the part of a GPT-2 or Llama model one rank holds (its pipeline stage, its TP
// shard) run for generation: a forward over the new rows of a batch of sequences that appends
// their keys and values to a KV cache and attends against it, then the last stage's logits of
// each sequence's last new row. Prefill (a prompt's rows) and decode (one row per sequence) are
// the same call.
#pragma once
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "layout/param_layout.h"
#include "model/block.h"
#include "model/kv_cache.h"
#include "parallel/parallel_ctx.h"

namespace loom {

class DecodeStage {
 public:
  // layout: this rank's parameters (one chunk per stage; any tp, pp); seqs: sequence slots of
  // the cache; max_rows: rows one forward may hold (at least m.seq_len, so that one whole
  // prompt fits). Dense models only (MoE is refused by the caller).
  DecodeStage(const ModelConfig& m, const ParamLayout& layout, ParallelCtx& pc, Backend& be,
              int seqs, int max_rows);

  const ParamLayout& layout() const { return layout_; }
  Backend& backend() const { return be_; }
  int max_rows() const { return max_rows_; }
  int seqs() const { return seqs_; }  // sequence slots of the cache
  int positions() const { return cache_.positions(); }
  size_t cache_bytes() const { return cache_.bytes(); }
  // Sets this rank's fp32 parameters from host memory (layout order, layout().total()).
  void set_params(const float* host);
  // fp32 parameters in backend memory, read by the kernels unless the act dtype is lower.
  const float* params() const { return static_cast<const float*>(params_.data()); }

  // (R, C) act-dtype activations entering the stage (filled by the caller on all stages but the
  // first, from the previous stage) and leaving it after forward (all stages but the last).
  void* input() { return x_[0]; }
  void* output() { return x_[out_]; }

  // One forward over the rows of `spans` (R = sum of n <= max_rows). First stage: tokens (R)
  // on the host are embedded at their positions; others read input(). Last stage: also the
  // logits of each span's last row, gathered over TP, into host (spans, padded vocab) fp32.
  void forward(const std::vector<RowSpan>& spans, const int32_t* tokens,
               std::vector<float>* logits);

 private:
  const void* cw(const std::string& name) const;
  void embed(const std::vector<RowSpan>& spans, const int32_t* tokens, int R);
  void layer(int w, const std::vector<RowSpan>& spans, const void* x, void* out, int R);
  void head(const std::vector<RowSpan>& spans, const void* x, int R, std::vector<float>& out);

  const ModelConfig m_;
  const ParamLayout layout_;
  ParallelCtx& pc_;
  Backend& be_;
  BlockDims d_;  // one block on this TP rank, rows set per forward (B = 1, T = R)
  int max_rows_;
  Buffer params_, cw_;  // fp32 parameters; their act-dtype copy (low precision only)
  std::vector<BlockWeights> w_;
  KvCache cache_;
  Buffer work_;
  void* x_[3];  // (max_rows, C) each: stage input, then ping-pong layer outputs
  int out_ = 0;
  void *ln_, *qkv_, *atty_, *res2_, *fch_, *fchg_, *proj_;
  float* rstd_;
  float* mean_;
  float *cos_, *sin_;  // (T, D/2) RoPE tables (llama)
  CachedAttnScratch attn_;
  void *sel_, *logits_, *gathered_;  // (seqs, C), (seqs, Vl), (tp, seqs, Vl)
  int32_t* tok_;                     // (max_rows) the step's tokens (first stage)
  int seqs_;
};

}  // namespace loom
