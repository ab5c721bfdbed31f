// GPTStage: allocation of parameters/activations, and forward/backward of one micro-batch.
#include "model/gpt_stage.h"

#include <algorithm>
#include <cstring>

#include "kernels/classifier.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

namespace loom {

GPTStage::GPTStage(const ModelConfig& m, const ParamLayout& layout, int micro_batch,
                   int num_slots, ParallelCtx& pc, size_t param_capacity, GradHooks hooks,
                   ParamHooks param_hooks, Recompute recompute)
    : m_(m), layout_(layout), pc_(pc), hooks_(std::move(hooks)), phooks_(std::move(param_hooks)),
      recompute_(recompute) {
  const int tp = layout.tp();
  dims_ = BlockDims{micro_batch, m.seq_len, m.d_model, m.n_head / tp, tp};
  const size_t N = size_t(dims_.N()), C = size_t(dims_.C), L = size_t(layout.layers().num_layers);

  if (!phooks_.where) {  // default placement: one flat buffer, padded for ZeRO's shards
    const size_t cap = std::max(param_capacity, layout.total());
    params_buf_ = Buffer(cap * sizeof(float), Device::CPU);
    params_buf_.zero();
    params_ = Tensor(params_buf_.data(), DType::F32, Device::CPU, {int64_t(cap)});
    float* base = params_.f32();
    phooks_.where = [base](const ParamSpec& p) { return base + p.offset; };
  }
  if (!hooks_.where) {  // default placement: one flat buffer shaped like the parameters
    grads_buf_ = Buffer(layout.total() * sizeof(float), Device::CPU);
    grads_buf_.zero();
    grads_ = Tensor(grads_buf_.data(), DType::F32, Device::CPU, {int64_t(layout.total())});
    float* base = grads_.f32();
    hooks_.where = [base](const ParamSpec& p) { return base + p.offset; };
  }
  for (size_t l = 0; l < L; ++l) {
    int layer = layout.layers().first_layer + int(l);
    w_.push_back(weights_at(phooks_.where, layer));
    g_.push_back(weights_at(hooks_.where, layer));
  }

  // Activation slots: reserve every tensor, allocate once, then hand out pointers.
  struct SlotOffsets {
    std::vector<size_t> xs, layers;
    size_t tokens = 0, dfinal = 0;
  };
  std::vector<SlotOffsets> offs(static_cast<size_t>(num_slots));
  // Kept per slot and layer: everything (none), everything but the attention probabilities
  // (selective), or nothing but the layer inputs (full).
  const bool per_layer = recompute != Recompute::Full;
  const bool keep_att = recompute == Recompute::None;
  for (auto& o : offs) {
    for (size_t l = 0; l <= L; ++l) o.xs.push_back(acts_.reserve(N * C * 4));
    if (per_layer)
      for (size_t l = 0; l < L; ++l) o.layers.push_back(acts_.reserve(dims_.acts_floats(keep_att) * 4));
    if (layout.first_stage()) o.tokens = acts_.reserve(N * 4);
    if (layout.last_stage()) o.dfinal = acts_.reserve(N * C * 4);
  }
  // Shared by every slot and layer: the attention probabilities (selective) or a whole layer's
  // activations and the re-run output (full), rebuilt right before each layer's backward.
  const size_t att_floats = size_t(dims_.B) * dims_.NH * dims_.T * dims_.T;
  size_t o_shared = 0, o_rout = 0;
  if (recompute == Recompute::Selective) o_shared = acts_.reserve(att_floats * 4);
  if (recompute == Recompute::Full) {
    o_shared = acts_.reserve(dims_.acts_floats() * 4);
    o_rout = acts_.reserve(N * C * 4);
  }
  acts_.allocate();
  auto at = [&](Arena& a, size_t off) { return static_cast<float*>(a.buffer().data()) + off / 4; };
  if (recompute == Recompute::Full) recompute_out_ = at(acts_, o_rout);
  for (auto& o : offs) {
    Slot s;
    for (size_t off : o.xs) s.xs.push_back(at(acts_, off));
    if (recompute == Recompute::Full)
      s.layers.assign(L, block_acts_at(at(acts_, o_shared), dims_));
    for (size_t off : o.layers)
      s.layers.push_back(block_acts_at(at(acts_, off), dims_,
                                       keep_att ? nullptr : at(acts_, o_shared)));
    if (layout.first_stage()) s.tokens = reinterpret_cast<int32_t*>(at(acts_, o.tokens));
    if (layout.last_stage()) s.dfinal = at(acts_, o.dfinal);
    slots_.push_back(s);
  }

  const size_t Vl = size_t(layout.vocab_local());
  size_t o_bs = scratch_.reserve(BlockScratch::floats(dims_) * 4);
  size_t o_d0 = scratch_.reserve(N * C * 4), o_d1 = scratch_.reserve(N * C * 4);
  const size_t cls_work = cpu::classifier_work_floats(int(N), int(Vl));
  size_t o_head =
      layout.last_stage() ? scratch_.reserve((N * C * 2 + N * 7 + N * Vl + cls_work) * 4) : 0;
  scratch_.allocate();
  bs_ = block_scratch_at(at(scratch_, o_bs), dims_);
  dbuf_[0] = at(scratch_, o_d0);
  dbuf_[1] = at(scratch_, o_d1);
  if (layout.last_stage()) {
    float* p = at(scratch_, o_head);
    lnf_ = p, p += N * C;
    dlnf_ = p, p += N * C;
    lnf_mean_ = p, p += N;
    lnf_rstd_ = p, p += N;
    maxv_ = p, p += N;
    lmax_ = p, p += N;
    losses_ = p, p += N;
    sums_ = p, p += 2 * N;
    cls_work_ = p, p += cls_work;
    logits_ = p;
  }
}

BlockWeights GPTStage::weights_at(const std::function<float*(const ParamSpec&)>& at,
                                  int layer) const {
  std::string h = "h." + std::to_string(layer) + ".";
  auto p = [&](const char* name) { return at(layout_.get(h + name)); };
  return BlockWeights{p("ln_1.weight"),      p("ln_1.bias"),       p("attn.c_attn.weight"),
                      p("attn.c_attn.bias"), p("attn.c_proj.weight"), p("attn.c_proj.bias"),
                      p("ln_2.weight"),      p("ln_2.bias"),       p("mlp.c_fc.weight"),
                      p("mlp.c_fc.bias"),    p("mlp.c_proj.weight"), p("mlp.c_proj.bias")};
}

void GPTStage::forward(int slot, const int32_t* tokens, const int32_t* targets, float dloss) {
  Slot& s = slots_[size_t(slot)];
  const int B = dims_.B, T = dims_.T, C = dims_.C, N = dims_.N();
  const bool ends = layout_.first_stage() || layout_.last_stage();
  if (ends) gather(-1);  // embeddings, final norm, classifier
  if (layout_.first_stage()) {
    std::memcpy(s.tokens, tokens, size_t(N) * sizeof(int32_t));
    const float* wte = param("wte.weight");
    // Position embeddings are added by one TP rank so the all-reduce counts them once.
    const float* wpe = layout_.tp_rank() == 0 ? param("wpe.weight") : nullptr;
    cpu::embedding_forward(s.xs[0], tokens, wte, wpe, B, T, C, layout_.vocab_start(),
                           layout_.vocab_local());
    pc_.tp.all_reduce(s.xs[0], size_t(N) * C, ReduceOp::Sum);
  }
  const int first = layout_.layers().first_layer;
  for (size_t l = 0; l < w_.size(); ++l) {
    gather(first + int(l));
    block_forward(s.xs[l + 1], s.xs[l], w_[l], s.layers[l], bs_, dims_, pc_.tp);
    release(first + int(l));
  }
  if (layout_.last_stage()) head(s, targets, dloss);
  if (ends) release(-1);
}

void GPTStage::head(Slot& s, const int32_t* targets, float dloss) {
  const int N = dims_.N(), C = dims_.C, Vl = layout_.vocab_local();
  const int vstart = layout_.vocab_start(), V = m_.vocab_size;
  const float* x = s.xs.back();
  const ParamSpec& lnw = layout_.get("ln_f.weight");
  const ParamSpec& lnb = layout_.get("ln_f.bias");
  const ParamSpec& head = layout_.get(m_.tie_embeddings ? "wte.weight" : "lm_head.weight");
  const float* W = phooks_.where(head);  // (Vl, C)
  cpu::layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x, phooks_.where(lnw), phooks_.where(lnb),
                         N, C);
  // Logits (N, Vl) and this shard's softmax statistics, computed in vocab chunks while hot.
  cpu::classifier_forward(logits_, targets ? maxv_ : nullptr, targets ? sums_ : nullptr,
                          targets ? cls_work_ : nullptr, lnf_, W, targets, N, C, Vl, vstart, V);
  if (!targets) return;
  // Vocab-parallel cross-entropy: the row statistics are reduced over TP, logits never are.
  if (pc_.tp.size() > 1) {
    std::memcpy(lmax_, maxv_, size_t(N) * sizeof(float));
    pc_.tp.all_reduce(maxv_, size_t(N), ReduceOp::Max);
    cpu::ce_rescale_sums(sums_, lmax_, maxv_, N);
    pc_.tp.all_reduce(sums_, size_t(N) * 2, ReduceOp::Sum);
  }
  cpu::ce_loss(losses_, maxv_, sums_, N);
  double total = 0;
  for (int n = 0; n < N; ++n) total += losses_[n];
  loss_sum_ += total;
  if (dloss == 0.0f) return;
  // Backward through the classifier right away: only dlnf is kept, never the logits.
  cpu::classifier_backward(dlnf_, hooks_.where(head), logits_, maxv_, sums_, targets, dloss,
                           lnf_, W, N, C, Vl, vstart, V);
  pc_.tp.all_reduce(dlnf_, size_t(N) * C, ReduceOp::Sum);
  std::memset(s.dfinal, 0, size_t(N) * C * sizeof(float));
  cpu::layernorm_backward(s.dfinal, hooks_.where(lnw), hooks_.where(lnb), dlnf_, x,
                          phooks_.where(lnw), lnf_mean_, lnf_rstd_, N, C);
}

Recompute parse_recompute(const std::string& mode) {
  if (mode == "selective") return Recompute::Selective;
  if (mode == "full") return Recompute::Full;
  LOOM_CHECK(mode == "none", "train.recompute '", mode, "'");
  return Recompute::None;
}

// Rebuilds what layer l's backward needs and the chosen mode did not keep.
void GPTStage::recompute(Slot& s, int l) {
  const BlockActs& a = s.layers[size_t(l)];
  if (recompute_ == Recompute::Selective)  // probabilities from q, k (the output is not needed)
    cpu::attention_forward(bs_.datty, a.att, a.qkv, dims_.B, dims_.T, dims_.Cl(), dims_.NH);
  else if (recompute_ == Recompute::Full)  // the layer's whole forward, TP all-reduces included
    block_forward(recompute_out_, s.xs[size_t(l)], w_[size_t(l)], a, bs_, dims_, pc_.tp);
}

void GPTStage::backward(int slot, const float* dout, float* dinput) {
  Slot& s = slots_[size_t(slot)];
  const float* dcur = layout_.last_stage() ? s.dfinal : dout;
  LOOM_CHECK(dcur != nullptr, "backward of a middle stage needs the output gradient");
  const int L = int(w_.size());
  for (int l = L - 1; l >= 0; --l) {
    float* dnext = (l == 0 && dinput) ? dinput : dbuf_[(L - 1 - l) % 2];
    gather(layout_.layers().first_layer + l);
    recompute(s, l);
    block_backward(dnext, dcur, s.xs[size_t(l)], w_[size_t(l)], g_[size_t(l)],
                   s.layers[size_t(l)], bs_, dims_, pc_.tp);
    release(layout_.layers().first_layer + l);
    dcur = dnext;
    if (hooks_.layer_done) hooks_.layer_done(layout_.layers().first_layer + l);
  }
  if (layout_.first_stage()) {
    cpu::embedding_backward(grad("wte.weight"), grad("wpe.weight"), dcur, s.tokens, dims_.B,
                            dims_.T, dims_.C, layout_.vocab_start(), layout_.vocab_local());
  }
  if (hooks_.backward_done) hooks_.backward_done();
}

}  // namespace loom
