// DecodeStage: buffers, the cached forward of the stage's layers, embedding and head.
#include "model/decode_stage.h"

#include <algorithm>

#include "core/buffer.h"
#include "core/check.h"
#include "layout/run_layout.h"
#include "model/layer_tensors.h"

namespace loom {

DecodeStage::DecodeStage(const ModelConfig& m, const ParamLayout& layout, ParallelCtx& pc,
                         Backend& be, int seqs, int max_rows)
    : m_(m),
      layout_(layout),
      pc_(pc),
      be_(be),
      d_(block_dims(m, 1, layout.tp())),
      max_rows_(std::max(max_rows, m.seq_len)),
      cache_(be, layout.num_layers(), seqs, m.seq_len, d_),
      seqs_(seqs) {
  LOOM_CHECK(!m.is_moe(), "the cached decoder runs dense models");
  LOOM_CHECK(layout.virtual_stages() == 1, "the cached decoder runs one chunk per stage");
  const Device dev = be_.device();
  params_ = Buffer(layout_.total() * sizeof(float), dev);
  if (be_.lowp()) cw_ = Buffer(layout_.total() * be_.act_size(), dev);
  for (int l : layout_.layer_list())
    w_.push_back(
        layer_tensors<const void*>(layout_, l, [this](const ParamSpec& p) { return cw(p.name); }));
  // Activations of max_rows rows, the attention scratch and the head's buffers in one area.
  const int N = max_rows_, C = d_.C, T = m.seq_len, Vl = layout_.vocab_local();
  const DeviceTraits tr = be_.traits();
  const size_t e = be_.act_size(), n = size_t(N);
  auto carve = [&](Carver& c) {
    for (void*& x : x_) x = c.take(n * C * e);
    ln_ = c.take(n * C * e);
    qkv_ = c.take(n * d_.QKVl() * e);
    atty_ = c.take(n * d_.Cl() * e);
    res2_ = c.take(n * C * e);
    fch_ = c.take(n * d_.FCl() * e);
    fchg_ = c.take(n * d_.Hl() * e);
    proj_ = c.take(n * C * e);
    rstd_ = c.floats(n);
    mean_ = c.floats(n);
    cos_ = c.floats(size_t(T) * d_.D() / 2);
    sin_ = c.floats(size_t(T) * d_.D() / 2);
    sel_ = c.take(size_t(seqs) * C * e);
    logits_ = c.take(size_t(seqs) * Vl * e);
    gathered_ = c.take(size_t(layout_.tp()) * seqs * Vl * e);
    tok_ = static_cast<int32_t*>(c.take(n * sizeof(int32_t)));
    return c.take(attn_scratch_bytes(d_, T, tr));
  };
  Carver measure(nullptr, tr.align());
  carve(measure);
  work_ = Buffer(measure.used(), dev);
  be_.zero(work_.data(), work_.bytes());
  Carver c(work_.data(), tr.align());
  attn_ = carve_attn_scratch(be_, carve(c), d_, T);
  if (d_.gated) be_.rope_table(cos_, sin_, T, d_.D(), d_.theta);
}

const void* DecodeStage::cw(const std::string& name) const {
  const ParamSpec& p = layout_.get(name);
  if (be_.lowp()) return byte_at(cw_.data(), p.offset * be_.act_size());
  return static_cast<const float*>(params_.data()) + p.offset;
}

void DecodeStage::set_params(const float* host) {
  be_.from_host(params_.data(), host, layout_.total() * sizeof(float));
  if (be_.lowp())
    be_.cast_to_act(cw_.data(), static_cast<const float*>(params_.data()), layout_.total());
  be_.synchronize();
}

void DecodeStage::forward(const std::vector<RowSpan>& spans, const int32_t* tokens,
                          std::vector<float>* logits) {
  int R = 0;
  for (const RowSpan& s : spans) {
    LOOM_CHECK(
        s.slot >= 0 && s.slot < seqs_ && s.n >= 1 && s.start >= 0 && s.start + s.n <= m_.seq_len,
        "row span slot ", s.slot, " start ", s.start, " n ", s.n, " (", seqs_, " slots of ",
        m_.seq_len, " positions)");
    R += s.n;
  }
  LOOM_CHECK(!spans.empty() && R <= max_rows_ && int(spans.size()) <= seqs_, R, " rows in ",
             spans.size(), " spans; the stage holds ", max_rows_, " rows, ", seqs_, " sequences");
  d_.B = 1, d_.T = R;
  if (layout_.first_stage()) embed(spans, tokens, R);
  const void* x = x_[0];
  const int L = layout_.num_layers();
  for (int w = 0; w < L; ++w) {
    out_ = 1 + w % 2;
    layer(w, spans, x, x_[out_], R);
    x = x_[out_];
  }
  if (L == 0) out_ = 0;
  if (layout_.last_stage()) {
    LOOM_CHECK(logits != nullptr, "the last stage's forward needs somewhere for its logits");
    head(spans, x, R, *logits);
  }
}

// x_[0] (R, C) = wte rows of the tokens (this rank's vocab shard, summed over TP) + wpe rows
// of each span's positions (gpt2, added by TP rank 0 so the sum counts them once).
void DecodeStage::embed(const std::vector<RowSpan>& spans, const int32_t* tokens, int R) {
  const int C = d_.C, vs = layout_.vocab_start(), Vl = layout_.vocab_local();
  const size_t e = be_.act_size();
  be_.from_host(tok_, tokens, size_t(R) * sizeof(int32_t));
  const void* wte = cw("wte.weight");
  const void* wpe = layout_.tp_rank() == 0 && !m_.llama() ? cw("wpe.weight") : nullptr;
  size_t row = 0;
  for (const RowSpan& s : spans) {
    be_.embedding_forward(byte_at(x_[0], row * C * e), tok_ + row, wte,
                          wpe ? byte_at(wpe, size_t(s.start) * C * e) : nullptr, 1, s.n, C, vs, Vl);
    row += size_t(s.n);
  }
  pc_.tp.all_reduce(x_[0], size_t(R) * C, be_.act_dtype(), ReduceOp::Sum);
}

// out (R, C) = block(x) for local layer w, with attention against the cache.
void DecodeStage::layer(int w, const std::vector<RowSpan>& spans, const void* x, void* out, int R) {
  const BlockWeights& W = w_[size_t(w)];
  const int C = d_.C, D = d_.D(), QKV = d_.QKVl();
  const size_t e = be_.act_size(), half = size_t(D / 2);
  norm_forward(be_, ln_, mean_, rstd_, x, W.ln1_w, W.ln1_b, d_);
  be_.matmul_forward(qkv_, ln_, W.qkv_w, W.qkv_b, R, C, QKV);
  if (d_.gated) {  // RoPE of each span's rows at their positions
    size_t row = 0;
    for (const RowSpan& s : spans) {
      be_.rope_forward(byte_at(qkv_, row * QKV * e), cos_ + size_t(s.start) * half,
                       sin_ + size_t(s.start) * half, 1, s.n, d_.NH, d_.KV(), D);
      row += size_t(s.n);
    }
  }
  cached_attention(be_, atty_, qkv_, cache_, w, spans, attn_, d_);
  // Row-parallel projection: partial sums over TP, then bias and residual.
  be_.matmul_forward(proj_, atty_, W.proj_w, nullptr, R, d_.Cl(), C);
  pc_.tp.all_reduce(proj_, size_t(R) * C, be_.act_dtype(), ReduceOp::Sum);
  be_.bias_residual(res2_, x, proj_, W.proj_b, R, C);
  norm_forward(be_, ln_, mean_, rstd_, res2_, W.ln2_w, W.ln2_b, d_);
  be_.matmul_forward(fch_, ln_, W.fc_w, W.fc_b, R, C, d_.FCl());
  if (d_.gated)
    be_.swiglu_forward(fchg_, fch_, R, d_.Hl());
  else
    be_.gelu_forward(fchg_, fch_, size_t(R) * d_.Hl());
  be_.matmul_forward(proj_, fchg_, W.fcproj_w, nullptr, R, d_.Hl(), C);
  pc_.tp.all_reduce(proj_, size_t(R) * C, be_.act_dtype(), ReduceOp::Sum);
  be_.bias_residual(out, res2_, proj_, W.fcproj_b, R, C);
}

// Final norm of every row, then the classifier on each span's last row; the vocab shards of
// the TP ranks gathered into host (spans, Vl * tp).
void DecodeStage::head(const std::vector<RowSpan>& spans, const void* x, int R,
                       std::vector<float>& out) {
  const int C = d_.C, Vl = layout_.vocab_local(), tp = layout_.tp();
  const int S = int(spans.size());
  const size_t e = be_.act_size();
  const ParamSpec* lnb = layout_.find("ln_f.bias");
  norm_forward(be_, ln_, mean_, rstd_, x, cw("ln_f.weight"), lnb ? cw(lnb->name) : nullptr, d_);
  size_t row = 0;
  for (int i = 0; i < S; ++i) {
    row += size_t(spans[size_t(i)].n);
    be_.copy(byte_at(sel_, size_t(i) * C * e), byte_at(ln_, (row - 1) * C * e), size_t(C) * e);
  }
  const void* Wh = cw(m_.tie_embeddings ? "wte.weight" : "lm_head.weight");
  be_.classifier_forward(logits_, nullptr, nullptr, nullptr, sel_, Wh, nullptr, S, C, Vl,
                         layout_.vocab_start(), m_.vocab_size);
  const size_t part = size_t(S) * size_t(Vl);
  std::vector<float> g(part * size_t(tp));
  if (tp > 1) {
    pc_.tp.all_gather(logits_, gathered_, part, be_.act_dtype());
    be_.act_to_host_f32(g.data(), gathered_, g.size());
  } else {
    be_.act_to_host_f32(g.data(), logits_, part);
  }
  // (tp, S, Vl) -> (S, tp * Vl): rank r's shard holds ids [r*Vl, (r+1)*Vl).
  out.resize(g.size());
  for (int r = 0; r < tp; ++r)
    for (int i = 0; i < S; ++i)
      std::copy_n(g.data() + (size_t(r) * S + size_t(i)) * Vl, Vl,
                  out.data() + size_t(i) * Vl * tp + size_t(r) * Vl);
}

}  // namespace loom
