// GPTStage: allocation of parameters/activations, and forward/backward of one micro-batch.
#include "model/gpt_stage.h"

#include <algorithm>

#include "core/check.h"
#include "model/context_attention.h"
#include "model/layer_tensors.h"

namespace loom {

GPTStage::GPTStage(const RunLayout& run, const RankMemory& mem, ParallelCtx& pc, Backend& be,
                   GradHooks hooks, ParamHooks param_hooks)
    : run_(run),
      m_(run_.model()),
      layout_(run_.params()),
      pc_(pc),
      be_(be),
      hooks_(std::move(hooks)),
      phooks_(std::move(param_hooks)) {
  const Device dev = be_.device();
  const ParamLayout& layout = layout_;
  dims_ = run_.dims();
  fmt_ = act_format(be_.traits(), dims_);
  const size_t L = size_t(layout.num_layers());  // all chunks

  const size_t cap = mem.param_elems;
  if (!phooks_.where) {  // default placement: one flat buffer, padded for ZeRO's shards
    LOOM_CHECK(cap >= layout.total(), "parameter buffer of ", cap, " elements for a stage of ",
               layout.total());
    params_buf_ = Buffer(cap * sizeof(float), dev);
    params_buf_.zero();
    float* base = params();
    phooks_.where = [base](const ParamSpec& p) { return base + p.offset; };
  }
  if (be_.lowp()) {
    LOOM_CHECK(params_buf_.data() != nullptr,
               "low-precision compute weights need the default parameter placement (ZeRO < 3)");
    cw_buf_ = Buffer(cap * fmt_.act, dev);
    cw_buf_.zero();
  }
  if (!hooks_.where) {  // default placement: one flat buffer shaped like the parameters
    LOOM_CHECK(mem.grad_elems == layout.total(), "gradient buffer of ", mem.grad_elems,
               " elements for a stage of ", layout.total());
    grads_buf_ = Buffer(mem.grad_elems * sizeof(float), dev);
    grads_buf_.zero();
    float* base = grads();
    hooks_.where = [base](const ParamSpec& p) { return base + p.offset; };
  }
  LOOM_CHECK(L == size_t(layout.layer_list().size()), "layer list of ", L, " layers");
  for (int layer : layout.layer_list()) {
    w_.push_back(weights_at(layer));
    g_.push_back(grads_at(layer));
  }

  // Activation slots and scratch: the arenas of the memory model (layout/stage_memory.h),
  // allocated once and carved.
  const StageArenas& plan = mem.arenas;
  LOOM_CHECK(plan.fmt.act == fmt_.act && plan.fmt.align == fmt_.align,
             "the memory model was planned for another device (act ", plan.fmt.act,
             " bytes, align ", plan.fmt.align, ") than the backend's (", fmt_.act, ", ", fmt_.align,
             ")");
  const bool full = run_.recompute() == Recompute::Full;
  acts_ = Buffer(plan.acts_bytes, dev);
  acts_.zero();
  scratch_ = Buffer(plan.scratch_bytes, dev);
  scratch_.zero();
  auto at = [](Buffer& a, size_t off) { return static_cast<char*>(a.data()) + off; };
  if (full) recompute_out_ = at(acts_, plan.rerun_out);
  const int chunks = layout.virtual_stages();
  for (const StageArenas::Slot& o : plan.slots) {
    LOOM_CHECK(o.chunk >= 0 && o.chunk < chunks && o.xs.size() == L / size_t(chunks) + 1,
               "the memory model's slot of chunk ", o.chunk, " does not fit the stage's ", chunks,
               " chunks of ", L / size_t(chunks), " layers");
    if (chunk_slot0_.size() <= size_t(o.chunk)) chunk_slot0_.push_back(int(slots_.size()));
    Slot s;
    for (size_t off : o.xs) s.xs.push_back(at(acts_, off));
    if (full) s.layers.assign(o.xs.size() - 1, block_acts_at(at(acts_, plan.shared), dims_, fmt_));
    for (size_t off : o.layers)
      s.layers.push_back(block_acts_at(
          at(acts_, off), dims_, fmt_,
          plan.keep_att ? nullptr : reinterpret_cast<float*>(at(acts_, plan.shared))));
    if (embeds(o.chunk)) s.tokens = reinterpret_cast<int32_t*>(at(acts_, o.tokens));
    if (has_head(o.chunk)) s.dfinal = at(acts_, o.dfinal);
    slots_.push_back(s);
  }
  LOOM_CHECK(int(chunk_slot0_.size()) == chunks, "the memory model has slots for ",
             chunk_slot0_.size(), " of the stage's ", chunks, " chunks");
  chunk_slot0_.push_back(int(slots_.size()));
  bs_ = block_scratch_at(at(scratch_, plan.block_scratch), dims_, fmt_);
  fill_position_tables(be_, bs_, dims_, pc_.coord.cp);
  if (dims_.cp > 1)  // the ring's K|V blocks (act dtype) and their fp32 gradients, 2 of each
    pc_.cp.reserve_sends(size_t(dims_.N()) * 2 * dims_.KV() * dims_.D() * sizeof(float), 4);
  dbuf_[0] = at(scratch_, plan.dgrad[0]);
  dbuf_[1] = at(scratch_, plan.dgrad[1]);
  if (run_.last_stage())
    carve_head(head_, at(scratch_, plan.head), dims_.N(), dims_.C, layout_.vocab_local(), fmt_,
               be_.traits());
  loss_acc_ = Buffer(sizeof(double), be_.device());
  if (dims_.E > 0) {  // the step's MoE loss values: per sequence 1/G, per token 1/(G*seq_len)
    moe_loss_ = Buffer(2 * sizeof(double), be_.device());
    bs_.moe_loss = static_cast<double*>(moe_loss_.data());
    bs_.moe_seq_weight = 1.0 / run_.global_batch();
    bs_.moe_tok_weight = 1.0 / (double(run_.global_batch()) * m_.seq_len);
    moe_counts_.assign(L * size_t(dims_.E), 0);
    moe_dropped_.assign(L, 0);
    moe_choices_.assign(L, {});
    moe_kept_.assign(L, {});
  }
  reset_loss();
  reset_moe_stats();
}

void GPTStage::reset_moe_stats() {
  if (moe_loss_.data()) be_.zero(moe_loss_.data(), moe_loss_.bytes());
  std::fill(moe_counts_.begin(), moe_counts_.end(), 0);
  std::fill(moe_dropped_.begin(), moe_dropped_.end(), 0);
}

std::array<double, 2> GPTStage::moe_loss_sums() const {
  std::array<double, 2> v{0, 0};
  if (moe_loss_.data()) be_.to_host(v.data(), moe_loss_.data(), sizeof(v));
  return v;
}

void GPTStage::add_moe_counts(const BlockActs& a, int w) {
  const size_t E = size_t(dims_.E);
  std::vector<int32_t> counts(size_t(dims_.B) * E);
  int32_t kept = 0;
  be_.to_host(counts.data(), a.moe_counts, counts.size() * sizeof(int32_t));
  be_.to_host(&kept, a.moe_offsets + E, sizeof(int32_t));
  for (size_t i = 0; i < counts.size(); ++i) moe_counts_[size_t(w) * E + i % E] += counts[i];
  moe_dropped_[size_t(w)] += int64_t(dims_.N()) * dims_.k - kept;
  const size_t nk = size_t(dims_.N()) * size_t(dims_.k);
  std::vector<int32_t>& choice = moe_choices_[size_t(w)];
  std::vector<int32_t>& keep = moe_kept_[size_t(w)];
  choice.resize(nk);
  keep.resize(nk);
  be_.to_host(choice.data(), a.moe_choice, nk * sizeof(int32_t));
  be_.to_host(keep.data(), a.moe_slot, nk * sizeof(int32_t));
  for (int32_t& s : keep) s = s >= 0 ? 1 : 0;
}

const void* GPTStage::cw(const ParamSpec& p) const {
  if (!be_.lowp()) return phooks_.where(p);
  return static_cast<const char*>(cw_buf_.data()) + p.offset * fmt_.act;
}

void GPTStage::refresh_compute_weights() {
  if (be_.lowp()) be_.cast_to_act(cw_buf_.data(), params(), layout_.total());
}

BlockWeights GPTStage::weights_at(int layer) const {
  return layer_tensors<const void*>(layout_, layer, [this](const ParamSpec& p) { return cw(p); });
}

BlockGrads GPTStage::grads_at(int layer) const {
  return layer_tensors<float*>(layout_, layer,
                               [this](const ParamSpec& p) { return hooks_.where(p); });
}

GPTStage::Slot& GPTStage::slot_of(int chunk, int slot) {
  LOOM_CHECK(chunk >= 0 && size_t(chunk) + 1 < chunk_slot0_.size() && slot >= 0 &&
                 chunk_slot0_[size_t(chunk)] + slot < chunk_slot0_[size_t(chunk) + 1],
             "slot ", slot, " of chunk ", chunk, " is not on this stage");
  return slots_[size_t(chunk_slot0_[size_t(chunk)] + slot)];
}

void GPTStage::forward(int slot, const int32_t* tokens, const int32_t* targets, float dloss) {
  forward(0, slot, tokens, targets, dloss);
}

void GPTStage::forward(int chunk, int slot, const int32_t* tokens, const int32_t* targets,
                       float dloss) {
  Slot& s = slot_of(chunk, slot);
  const int C = dims_.C, N = dims_.N();
  const bool ends = embeds(chunk) || has_head(chunk);
  const StageRange r = layout_.chunks()[size_t(chunk)];
  const int first = r.first_layer, L = r.num_layers, w0 = layout_.local_layer(first);
  if (ends) gather(-1);  // embeddings, final norm, classifier
  if (embeds(chunk)) {
    prefetch(first);                                          // during the embedding
    be_.copy(s.tokens, tokens, size_t(N) * sizeof(int32_t));  // kept for the backward
    // Position embeddings (gpt2) are added by one TP rank so the all-reduce counts them once.
    const void* wpe = layout_.tp_rank() == 0 && !m_.llama() ? cw("wpe.weight") : nullptr;
    // Vocab-parallel partial sums (N, C), all-reduced, or reduce-scattered into this rank's
    // (Ns, C) rows with sequence parallelism.
    void* emb = dims_.sp ? bs_.proj : s.xs[0];
    embed_forward(emb, s.tokens, wpe);
    if (dims_.sp)
      pc_.tp.reduce_scatter(emb, s.xs[0], size_t(dims_.Ns()) * C, be_.act_dtype());
    else
      pc_.tp.all_reduce(emb, size_t(N) * C, be_.act_dtype(), ReduceOp::Sum);
  }
  for (int l = 0; l < L; ++l) {
    gather(first + l);
    if (l + 1 < L) prefetch(first + l + 1);
    const size_t i = size_t(l);
    if (dloss > 0) bs_.moe_dloss = dloss;  // the per-token weight of this step's backward
    block_forward(be_, s.xs[i + 1], s.xs[i], w_[size_t(w0 + l)], s.layers[i], bs_, dims_, pc_.tp,
                  pc_.cp, pc_.ep_group);
    if (dims_.E > 0) add_moe_counts(s.layers[i], w0 + l);
    release(first + l);
    poll();
  }
  if (has_head(chunk)) {
    if (targets && head_.targets) {  // device backends read their own copy
      be_.copy(head_.targets, targets, size_t(N) * sizeof(int32_t));
      targets = head_.targets;
    }
    head(s, targets, dloss);
  }
  if (ends) release(-1);
}

// The embedding of a micro-batch's tokens (N): wte rows + wpe (nullable) rows of the positions,
// and its backward into wte's and wpe's (nullable) gradients. With context parallelism each
// sequence's rows are two chunks of global positions (context_attention.h), done one chunk at a
// time (each_cp_chunk) so that each reads (adds to) its own rows of wpe.
template <typename F>
void GPTStage::each_cp_chunk(F f) const {
  const std::array<size_t, 2> first = cp_chunk_starts(dims_.T, dims_.cp, pc_.coord.cp);
  const size_t c = size_t(dims_.T / 2);
  for (size_t b = 0; b < size_t(dims_.B); ++b)
    for (size_t k = 0; k < 2; ++k) f(b * size_t(dims_.T) + k * c, first[k], int(c));
}

void GPTStage::embed_forward(void* out, const int32_t* tokens, const void* wpe) {
  const int C = dims_.C, vs = layout_.vocab_start(), Vl = layout_.vocab_local();
  const void* wte = cw("wte.weight");
  if (dims_.cp == 1 || !wpe) {
    be_.embedding_forward(out, tokens, wte, wpe, dims_.B, dims_.T, C, vs, Vl);
    return;
  }
  const size_t e = fmt_.act;
  each_cp_chunk([&](size_t row, size_t pos, int rows) {
    be_.embedding_forward(static_cast<char*>(out) + row * C * e, tokens + row, wte,
                          static_cast<const char*>(wpe) + pos * C * e, 1, rows, C, vs, Vl);
  });
}

void GPTStage::embed_backward(const void* dout, const int32_t* tokens, float* dwpe) {
  const int C = dims_.C, vs = layout_.vocab_start(), Vl = layout_.vocab_local();
  float* dwte = grad("wte.weight");
  if (dims_.cp == 1 || !dwpe) {
    be_.embedding_backward(dwte, dwpe, dout, tokens, dims_.B, dims_.T, C, vs, Vl);
    return;
  }
  const size_t e = fmt_.act;
  each_cp_chunk([&](size_t row, size_t pos, int rows) {
    be_.embedding_backward(dwte, dwpe + pos * C, static_cast<const char*>(dout) + row * C * e,
                           tokens + row, 1, rows, C, vs, Vl);
  });
}

void GPTStage::head(Slot& s, const int32_t* targets, float dloss) {
  const int N = dims_.N(), C = dims_.C, Vl = layout_.vocab_local();
  const int vstart = layout_.vocab_start(), V = m_.vocab_size;
  const void* x = s.xs.back();
  const ParamSpec& lnw = layout_.get("ln_f.weight");
  const ParamSpec* lnb = layout_.find("ln_f.bias");  // none on llama
  const ParamSpec& head = layout_.get(m_.tie_embeddings ? "wte.weight" : "lm_head.weight");
  const void* W = cw(head);  // (Vl, C)
  // With sequence parallelism the final norm runs on this rank's (Ns, C) rows and its output is
  // all-gathered for the classifier, which sees every row as without it (the same loss).
  const size_t NsC = size_t(dims_.Ns()) * C;
  norm_forward(be_, dims_.sp ? bs_.shard : head_.lnf, head_.lnf_mean, head_.lnf_rstd, x, cw(lnw),
               lnb ? cw(*lnb) : nullptr, dims_);
  if (dims_.sp) pc_.tp.all_gather(bs_.shard, head_.lnf, NsC, be_.act_dtype());
  // Logits (N, Vl) and this shard's softmax statistics.
  be_.classifier_forward(head_.logits, targets ? head_.maxv : nullptr,
                         targets ? head_.sums : nullptr, targets ? head_.cls_work : nullptr,
                         head_.lnf, W, targets, N, C, Vl, vstart, V);
  if (!targets) return;
  // Vocab-parallel cross-entropy: the row statistics are reduced over TP, logits never are.
  if (run_.tp() > 1) {
    be_.copy(head_.lmax, head_.maxv, size_t(N) * sizeof(float));
    pc_.tp.all_reduce(head_.maxv, size_t(N), ReduceOp::Max);
    be_.ce_rescale_sums(head_.sums, head_.lmax, head_.maxv, N);
    pc_.tp.all_reduce(head_.sums, size_t(N) * 2, ReduceOp::Sum);
  }
  be_.ce_loss(head_.losses, head_.maxv, head_.sums, N);
  be_.sum_values(loss_acc(), head_.losses, size_t(N));
  if (dloss == 0.0f) return;
  // Backward through the classifier right away: only dlnf is kept, never the logits.
  be_.classifier_backward(head_.dlnf, hooks_.where(head), head_.logits, head_.maxv, head_.sums,
                          targets, dloss, head_.lnf, W, N, C, Vl, vstart, V);
  be_.zero(s.dfinal, NsC * fmt_.act);
  if (!dims_.sp) {
    pc_.tp.all_reduce(head_.dlnf, size_t(N) * C, be_.act_dtype(), ReduceOp::Sum);
    norm_backward(be_, s.dfinal, hooks_.where(lnw), lnb ? hooks_.where(*lnb) : nullptr, head_.dlnf,
                  x, cw(lnw), head_.lnf_mean, head_.lnf_rstd, dims_);
    return;
  }
  // Sequence parallel: this rank's rows of the gradient, and partial norm weight gradients
  // summed over TP before they are accumulated (as in block_backward).
  pc_.tp.reduce_scatter(head_.dlnf, bs_.shard, NsC, be_.act_dtype());
  const size_t nn = lnb ? 2 : 1, Cs = size_t(C);
  be_.zero(bs_.normg, nn * Cs * sizeof(float));
  norm_backward(be_, s.dfinal, bs_.normg, lnb ? bs_.normg + Cs : nullptr, bs_.shard, x, cw(lnw),
                head_.lnf_mean, head_.lnf_rstd, dims_);
  pc_.tp.all_reduce(bs_.normg, nn * Cs, ReduceOp::Sum);
  be_.add_inplace(hooks_.where(lnw), bs_.normg, Cs);
  if (lnb) be_.add_inplace(hooks_.where(*lnb), bs_.normg + Cs, Cs);
}

double GPTStage::loss_sum() const {
  double s = 0;
  be_.to_host(&s, loss_acc_.data(), sizeof(s));
  return s;
}

void GPTStage::logits_to_host(float* out) const {
  be_.act_to_host_f32(out, head_.logits, size_t(dims_.N()) * size_t(layout_.vocab_local()));
}

// Rebuilds what layer l's backward needs and the chosen mode did not keep.
void GPTStage::recompute(Slot& s, int l, int w) {
  const BlockActs& a = s.layers[size_t(l)];
  if (run_.recompute() == Recompute::Selective &&
      attention_keeps_probabilities(be_.traits(), dims_))
    // The probabilities from q, k (the output, written to scratch, is not needed).
    be_.attention_forward(bs_.datty, a.att, a.qkv, dims_.B, dims_.T, dims_.NH, dims_.KV(),
                          dims_.D());
  else if (run_.recompute() == Recompute::Full) {
    // The layer's whole forward, TP all-reduces included; its MoE losses are counted once.
    double* losses = bs_.moe_loss;
    bs_.moe_loss = nullptr;
    block_forward(be_, recompute_out_, s.xs[size_t(l)], w_[size_t(w)], a, bs_, dims_, pc_.tp,
                  pc_.cp, pc_.ep_group);
    bs_.moe_loss = losses;
  }
}

void GPTStage::backward(int slot, const void* dout, void* dinput, bool last) {
  backward(0, slot, dout, dinput, last, last);
}

void GPTStage::backward(int chunk, int slot, const void* dout, void* dinput, bool last,
                        bool step_last) {
  Slot& s = slot_of(chunk, slot);
  const void* dcur = has_head(chunk) ? s.dfinal : dout;
  LOOM_CHECK(dcur != nullptr, "backward of a middle chunk needs the output gradient");
  const StageRange r = layout_.chunks()[size_t(chunk)];
  const int L = r.num_layers, first = r.first_layer, w0 = layout_.local_layer(first);
  for (int l = L - 1; l >= 0; --l) {
    void* dnext = (l == 0 && dinput) ? dinput : dbuf_[(L - 1 - l) % 2];
    gather(first + l);
    if (l > 0) prefetch(first + l - 1);
    recompute(s, l, w0 + l);
    if (hooks_.layer_begin) hooks_.layer_begin(first + l);
    block_backward(be_, dnext, dcur, s.xs[size_t(l)], w_[size_t(w0 + l)], g_[size_t(w0 + l)],
                   s.layers[size_t(l)], bs_, dims_, pc_.tp, pc_.cp, pc_.ep_group);
    release(first + l);
    dcur = dnext;
    if (hooks_.layer_done) hooks_.layer_done(first + l, last);
    poll();
  }
  if (embeds(chunk)) {
    if (dims_.sp) {  // every row's gradient: the reduce-scatter's backward
      pc_.tp.all_gather(dcur, bs_.proj, size_t(dims_.Ns()) * dims_.C, be_.act_dtype());
      dcur = bs_.proj;
    }
    float* dwpe = m_.llama() ? nullptr : grad("wpe.weight");
    embed_backward(dcur, s.tokens, dwpe);
  }
  if (hooks_.backward_done) hooks_.backward_done(step_last);
}

}  // namespace loom
