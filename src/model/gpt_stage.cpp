// GPTStage: allocation of parameters/activations, and forward/backward of one micro-batch.
#include "model/gpt_stage.h"

#include <algorithm>

namespace loom {

GPTStage::GPTStage(const ModelConfig& m, const ParamLayout& layout, int micro_batch, int num_slots,
                   ParallelCtx& pc, size_t param_capacity, GradHooks hooks, ParamHooks param_hooks,
                   Recompute recompute, Backend* be)
    : m_(m),
      layout_(layout),
      pc_(pc),
      be_(be ? *be : cpu_backend()),
      hooks_(std::move(hooks)),
      phooks_(std::move(param_hooks)),
      recompute_(recompute),
      acts_(be_.device()),
      scratch_(be_.device()) {
  const int tp = layout.tp();
  const Device dev = be_.device();
  dims_ = BlockDims{micro_batch, m.seq_len, m.d_model, m.n_head / tp, tp};
  fmt_ = act_format(be_, dims_);
  const size_t N = size_t(dims_.N()), C = size_t(dims_.C), L = size_t(layout.layers().num_layers);
  const size_t e = fmt_.act;

  const size_t cap = std::max(param_capacity, layout.total());
  if (!phooks_.where) {  // default placement: one flat buffer, padded for ZeRO's shards
    params_buf_ = Buffer(cap * sizeof(float), dev);
    params_buf_.zero();
    params_ = Tensor(params_buf_.data(), DType::F32, dev, {int64_t(cap)});
    float* base = params_.f32();
    phooks_.where = [base](const ParamSpec& p) { return base + p.offset; };
  }
  if (be_.lowp()) {
    LOOM_CHECK(params_buf_.data() != nullptr,
               "low-precision compute weights need the default parameter placement (ZeRO < 3)");
    cw_buf_ = Buffer(cap * e, dev);
    cw_buf_.zero();
  }
  if (!hooks_.where) {  // default placement: one flat buffer shaped like the parameters
    grads_buf_ = Buffer(layout.total() * sizeof(float), dev);
    grads_buf_.zero();
    grads_ = Tensor(grads_buf_.data(), DType::F32, dev, {int64_t(layout.total())});
    float* base = grads_.f32();
    hooks_.where = [base](const ParamSpec& p) { return base + p.offset; };
  }
  for (size_t l = 0; l < L; ++l) {
    int layer = layout.layers().first_layer + int(l);
    w_.push_back(weights_at(layer));
    g_.push_back(grads_at(layer));
  }

  // Activation slots: reserve every tensor, allocate once, then hand out pointers.
  struct SlotOffsets {
    std::vector<size_t> xs, layers;
    size_t tokens = 0, dfinal = 0;
  };
  std::vector<SlotOffsets> offs(static_cast<size_t>(num_slots));
  // Kept per slot and layer: everything (none), everything but the attention probabilities
  // (selective), or nothing but the layer inputs (full). A backend whose attention keeps only
  // row statistics (cuda) has nothing for selective to drop: it keeps them per layer.
  const bool per_layer = recompute != Recompute::Full;
  const bool keep_att = recompute == Recompute::None || !be_.attention_saves_probabilities();
  for (auto& o : offs) {
    for (size_t l = 0; l <= L; ++l) o.xs.push_back(acts_.reserve(N * C * e));
    if (per_layer)
      for (size_t l = 0; l < L; ++l)
        o.layers.push_back(acts_.reserve(dims_.acts_bytes(fmt_, keep_att)));
    if (layout.first_stage()) o.tokens = acts_.reserve(N * 4);
    if (layout.last_stage()) o.dfinal = acts_.reserve(N * C * e);
  }
  // Shared by every slot and layer: the attention probabilities (selective), or a whole layer's
  // activations and the re-run output (full), rebuilt right before each layer's backward.
  size_t o_shared = 0, o_rout = 0;
  if (per_layer && !keep_att) o_shared = acts_.reserve(fmt_.att_saved * 4);
  if (recompute == Recompute::Full) {
    o_shared = acts_.reserve(dims_.acts_bytes(fmt_, true));
    o_rout = acts_.reserve(N * C * e);
  }
  acts_.allocate();
  auto at = [](Arena& a, size_t off) { return static_cast<char*>(a.buffer().data()) + off; };
  if (recompute == Recompute::Full) recompute_out_ = at(acts_, o_rout);
  for (auto& o : offs) {
    Slot s;
    for (size_t off : o.xs) s.xs.push_back(at(acts_, off));
    if (recompute == Recompute::Full)
      s.layers.assign(L, block_acts_at(at(acts_, o_shared), dims_, fmt_));
    for (size_t off : o.layers)
      s.layers.push_back(
          block_acts_at(at(acts_, off), dims_, fmt_,
                        keep_att ? nullptr : reinterpret_cast<float*>(at(acts_, o_shared))));
    if (layout.first_stage()) s.tokens = reinterpret_cast<int32_t*>(at(acts_, o.tokens));
    if (layout.last_stage()) s.dfinal = at(acts_, o.dfinal);
    slots_.push_back(s);
  }

  // Scratch: the block backward's, two ping-pong gradients, and the head (last stage).
  const int Vl = layout.vocab_local();
  const size_t cls_work = be_.classifier_work_floats(int(N), Vl);
  auto carve_head = [&](void* base) {
    Carver c(base, fmt_.align);
    lnf_ = c.take(N * C * e);
    dlnf_ = c.take(N * C * e);
    lnf_mean_ = c.floats(N);
    lnf_rstd_ = c.floats(N);
    maxv_ = c.floats(N);
    lmax_ = c.floats(N);
    losses_ = c.floats(N);
    sums_ = c.floats(2 * N);
    cls_work_ = c.floats(cls_work);
    logits_ = c.take(N * size_t(Vl) * e);
    if (dev != Device::CPU) targets_ = static_cast<int32_t*>(c.take(N * 4));
    return c.used();
  };
  size_t o_bs = scratch_.reserve(BlockScratch::bytes(dims_, fmt_));
  size_t o_d0 = scratch_.reserve(N * C * e), o_d1 = scratch_.reserve(N * C * e);
  size_t o_head = layout.last_stage() ? scratch_.reserve(carve_head(nullptr)) : 0;
  scratch_.allocate();
  bs_ = block_scratch_at(at(scratch_, o_bs), dims_, fmt_);
  dbuf_[0] = at(scratch_, o_d0);
  dbuf_[1] = at(scratch_, o_d1);
  if (layout.last_stage()) carve_head(at(scratch_, o_head));
  losses_host_.resize(N);
}

const void* GPTStage::cw(const ParamSpec& p) const {
  if (!be_.lowp()) return phooks_.where(p);
  return static_cast<const char*>(cw_buf_.data()) + p.offset * fmt_.act;
}

void GPTStage::refresh_compute_weights() {
  if (be_.lowp()) be_.cast_to_act(cw_buf_.data(), params(), layout_.total());
}

namespace {
// Layer `layer`'s twelve tensors in BlockTensors order, each looked up by at("h.<layer>.<name>").
template <typename P, typename At>
BlockTensors<P> layer_tensors(int layer, At at) {
  const std::string h = "h." + std::to_string(layer) + ".";
  auto p = [&](const char* name) { return at(h + name); };
  return BlockTensors<P>{p("ln_1.weight"),      p("ln_1.bias"),          p("attn.c_attn.weight"),
                         p("attn.c_attn.bias"), p("attn.c_proj.weight"), p("attn.c_proj.bias"),
                         p("ln_2.weight"),      p("ln_2.bias"),          p("mlp.c_fc.weight"),
                         p("mlp.c_fc.bias"),    p("mlp.c_proj.weight"),  p("mlp.c_proj.bias")};
}
}  // namespace

BlockWeights GPTStage::weights_at(int layer) const {
  return layer_tensors<const void*>(layer, [this](const std::string& n) { return cw(n); });
}

BlockGrads GPTStage::grads_at(int layer) const {
  return layer_tensors<float*>(layer, [this](const std::string& n) { return grad(n); });
}

void GPTStage::forward(int slot, const int32_t* tokens, const int32_t* targets, float dloss) {
  Slot& s = slots_[size_t(slot)];
  const int B = dims_.B, T = dims_.T, C = dims_.C, N = dims_.N();
  const bool ends = layout_.first_stage() || layout_.last_stage();
  const int first = layout_.layers().first_layer, L = int(w_.size());
  if (ends) gather(-1);  // embeddings, final norm, classifier
  if (layout_.first_stage()) {
    prefetch(first);  // during the embedding
    be_.from_host(s.tokens, tokens, size_t(N) * sizeof(int32_t));
    // Position embeddings are added by one TP rank so the all-reduce counts them once.
    const void* wpe = layout_.tp_rank() == 0 ? cw("wpe.weight") : nullptr;
    be_.embedding_forward(s.xs[0], s.tokens, cw("wte.weight"), wpe, B, T, C, layout_.vocab_start(),
                          layout_.vocab_local());
    pc_.tp.all_reduce(s.xs[0], size_t(N) * C, be_.act_dtype(), ReduceOp::Sum);
  }
  for (int l = 0; l < L; ++l) {
    gather(first + l);
    if (l + 1 < L) prefetch(first + l + 1);
    const size_t i = size_t(l);
    block_forward(be_, s.xs[i + 1], s.xs[i], w_[i], s.layers[i], bs_, dims_, pc_.tp);
    release(first + l);
    poll();
  }
  if (layout_.last_stage()) {
    if (targets && targets_) {  // device backends read a device copy
      be_.from_host(targets_, targets, size_t(N) * sizeof(int32_t));
      targets = targets_;
    }
    head(s, targets, dloss);
  }
  if (ends) release(-1);
}

void GPTStage::head(Slot& s, const int32_t* targets, float dloss) {
  const int N = dims_.N(), C = dims_.C, Vl = layout_.vocab_local();
  const int vstart = layout_.vocab_start(), V = m_.vocab_size;
  const void* x = s.xs.back();
  const ParamSpec& lnw = layout_.get("ln_f.weight");
  const ParamSpec& lnb = layout_.get("ln_f.bias");
  const ParamSpec& head = layout_.get(m_.tie_embeddings ? "wte.weight" : "lm_head.weight");
  const void* W = cw(head);  // (Vl, C)
  be_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x, cw(lnw), cw(lnb), N, C);
  // Logits (N, Vl) and this shard's softmax statistics.
  be_.classifier_forward(logits_, targets ? maxv_ : nullptr, targets ? sums_ : nullptr,
                         targets ? cls_work_ : nullptr, lnf_, W, targets, N, C, Vl, vstart, V);
  if (!targets) return;
  // Vocab-parallel cross-entropy: the row statistics are reduced over TP, logits never are.
  if (pc_.tp.size() > 1) {
    be_.copy(lmax_, maxv_, size_t(N) * sizeof(float));
    pc_.tp.all_reduce(maxv_, size_t(N), ReduceOp::Max);
    be_.ce_rescale_sums(sums_, lmax_, maxv_, N);
    pc_.tp.all_reduce(sums_, size_t(N) * 2, ReduceOp::Sum);
  }
  be_.ce_loss(losses_, maxv_, sums_, N);
  be_.to_host(losses_host_.data(), losses_, size_t(N) * sizeof(float));
  double total = 0;
  for (int n = 0; n < N; ++n) total += losses_host_[size_t(n)];
  loss_sum_ += total;
  if (dloss == 0.0f) return;
  // Backward through the classifier right away: only dlnf is kept, never the logits.
  be_.classifier_backward(dlnf_, hooks_.where(head), logits_, maxv_, sums_, targets, dloss, lnf_, W,
                          N, C, Vl, vstart, V);
  pc_.tp.all_reduce(dlnf_, size_t(N) * C, be_.act_dtype(), ReduceOp::Sum);
  be_.zero(s.dfinal, size_t(N) * C * fmt_.act);
  be_.layernorm_backward(s.dfinal, hooks_.where(lnw), hooks_.where(lnb), dlnf_, x, cw(lnw),
                         lnf_mean_, lnf_rstd_, N, C);
}

void GPTStage::logits_to_host(float* out) const {
  be_.act_to_host_f32(out, logits_, size_t(dims_.N()) * size_t(layout_.vocab_local()));
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
  if (recompute_ == Recompute::Selective && be_.attention_saves_probabilities())
    // The probabilities from q, k (the output, written to scratch, is not needed).
    be_.attention_forward(bs_.datty, a.att, a.qkv, dims_.B, dims_.T, dims_.Cl(), dims_.NH);
  else if (recompute_ == Recompute::Full)  // the layer's whole forward, TP all-reduces included
    block_forward(be_, recompute_out_, s.xs[size_t(l)], w_[size_t(l)], a, bs_, dims_, pc_.tp);
}

void GPTStage::backward(int slot, const void* dout, void* dinput) {
  Slot& s = slots_[size_t(slot)];
  const void* dcur = layout_.last_stage() ? s.dfinal : dout;
  LOOM_CHECK(dcur != nullptr, "backward of a middle stage needs the output gradient");
  const int L = int(w_.size()), first = layout_.layers().first_layer;
  for (int l = L - 1; l >= 0; --l) {
    void* dnext = (l == 0 && dinput) ? dinput : dbuf_[(L - 1 - l) % 2];
    gather(first + l);
    if (l > 0) prefetch(first + l - 1);
    recompute(s, l);
    if (hooks_.layer_begin) hooks_.layer_begin(first + l);
    block_backward(be_, dnext, dcur, s.xs[size_t(l)], w_[size_t(l)], g_[size_t(l)],
                   s.layers[size_t(l)], bs_, dims_, pc_.tp);
    release(first + l);
    dcur = dnext;
    if (hooks_.layer_done) hooks_.layer_done(first + l);
    poll();
  }
  if (layout_.first_stage()) {
    be_.embedding_backward(grad("wte.weight"), grad("wpe.weight"), dcur, s.tokens, dims_.B, dims_.T,
                           dims_.C, layout_.vocab_start(), layout_.vocab_local());
  }
  if (hooks_.backward_done) hooks_.backward_done();
}

}  // namespace loom
