// The kernels of one training step as loom's cuda backend launches them, with their FLOPs and
// bytes from the model's dimensions, and the roofline time of each.
#include "plan/kernel_model.h"

#include <algorithm>

#include "core/check.h"
#include "model/flops.h"

namespace loom::plan {

double roofline_seconds(double flops, double bytes, double flops_per_s, double bytes_per_s) {
  return std::max(flops / flops_per_s, bytes / bytes_per_s);
}

std::vector<std::string> kernel_shape_errors(const KernelShape& s, const GpuRoof& g) {
  std::vector<std::string> e;
  const ModelConfig& m = s.model;
  if (s.micro_batch < 1) e.push_back(str("micro-batch ", s.micro_batch, " must be >= 1"));
  if (s.micro_batches < 1) e.push_back(str("micro-batches ", s.micro_batches, " must be >= 1"));
  if (s.tp < 1) e.push_back(str("tp ", s.tp, " must be >= 1"));
  if (s.act_bytes != 2 && s.act_bytes != 4)
    e.push_back(str("activation element size ", s.act_bytes, " must be 2 or 4 bytes"));
  if (m.n_layer < 1 || m.n_head < 1 || m.d_model < 1 || m.seq_len < 1 || m.vocab_size < 1)
    e.push_back("model.n_layer, n_head, d_model, seq_len and vocab_size must be >= 1");
  else if (m.d_model % m.n_head != 0)
    e.push_back(str("n_head ", m.n_head, " does not divide d_model ", m.d_model));
  else if (m.kv_heads() < 1 || m.n_head % m.kv_heads() != 0)
    e.push_back(str("n_kv_head ", m.kv_heads(), " does not divide n_head ", m.n_head));
  else if (m.ffn() < 1)
    e.push_back(str("ffn_hidden ", m.ffn(), " must be >= 1"));
  else if (s.tp >= 1 && m.n_head % s.tp != 0)
    e.push_back(str("tp ", s.tp, " does not divide n_head ", m.n_head));
  else if (s.tp >= 1 && m.kv_heads() % s.tp != 0)
    e.push_back(str("tp ", s.tp, " does not divide n_kv_head ", m.kv_heads()));
  else if (s.tp >= 1 && m.ffn() % s.tp != 0)
    e.push_back(str("tp ", s.tp, " does not divide the MLP width ", m.ffn()));
  if (!(g.tensor_flops > 0) || !(g.vector_flops > 0) || !(g.bandwidth > 0) ||
      !(g.attention_flops >= 0) || !(g.launch_s >= 0))
    e.push_back("GPU FLOP/s and bandwidth must be > 0, launch overhead >= 0");
  return e;
}

double GpuRoof::attention(const KernelShape& s) const {
  if (attention_flops > 0) return attention_flops;
  const int hd = s.model.head_dim();
  return s.act_bytes == 2 && (hd == 64 || hd == 128) ? tensor_flops : vector_flops;
}

namespace {

// Appends one kernel: `calls` launches per step, each of `flops` and `bytes`.
struct Builder {
  const GpuRoof& g;
  const KernelShape& s;
  KernelStep& k;
  void add(const std::string& name, const char* part, Unit u, double calls, double flops,
           double bytes) {
    KernelCost c;
    c.name = name;
    c.part = part;
    c.unit = u;
    c.calls = calls;
    c.flops = calls * flops;
    c.bytes = calls * bytes;
    const double rate = u == Unit::Tensor      ? g.tensor_flops
                        : u == Unit::Attention ? g.attention(s)
                                               : g.vector_flops;
    c.compute_s = c.flops / rate;
    c.memory_s = c.bytes / g.bandwidth;
    c.time_s = roofline_seconds(c.flops, c.bytes, rate, g.bandwidth);
    k.kernels.push_back(c);
  }
};

}  // namespace

KernelStep kernel_step(const KernelShape& s, const GpuRoof& g) {
  const std::vector<std::string> errors = kernel_shape_errors(s, g);
  LOOM_CHECK(errors.empty(), "kernel_step: ", errors.front());
  const ModelConfig& m = s.model;
  const bool llama = m.llama();
  // Sizes as doubles: (B*T) x V products overflow int. Cl: this rank's query width NH*D/tp;
  // KVl: its key (and value) width NKV*D/tp; Hl: its MLP hidden F/tp (llama: the fc GEMM
  // writes gate|up, 2*Hl columns, and SwiGLU reduces them to Hl).
  const double B = s.micro_batch, T = m.seq_len, N = B * T, C = m.d_model, L = m.n_layer;
  const double tp = s.tp, hd = m.head_dim(), NHl = m.n_head / tp, Cl = NHl * hd;
  const double KVl = m.kv_heads() / tp * hd, QKVl = Cl + 2 * KVl, Hl = m.ffn() / tp;
  const double FCl = llama ? 2 * Hl : Hl;  // fc GEMM output columns
  const double Vl = double(m.padded_vocab(s.tp)) / tp, mb = s.micro_batches;
  const double a = s.act_bytes, f = 4;  // activation and fp32 element sizes
  const double rows = B * NHl * T;      // attention rows (lse, delta) of this rank
  const double Lm = L * mb;
  const std::string norm = llama ? "RMSNorm" : "LayerNorm";

  KernelStep k;
  Builder b{g, s, k};
  // A GEMM out (N, OC) = in (N, IC) @ W (IC, OC): forward (+ bias), dX, dW (fp32, accumulated:
  // read and written), each operand moved once.
  auto gemm_fwd = [&](const std::string& n, double IC, double OC, bool bias, const char* part,
                      double calls) {
    b.add(n + " GEMM fwd", part, Unit::Tensor, calls, 2 * N * IC * OC,
          a * (N * IC + IC * OC + N * OC + (bias ? OC : 0)));
  };
  auto gemm_bwd = [&](const std::string& n, double IC, double OC, const char* part, double calls) {
    b.add(n + " GEMM dX", part, Unit::Tensor, calls, 2 * N * IC * OC,
          a * (N * OC + IC * OC + N * IC));
    b.add(n + " GEMM dW", part, Unit::Tensor, calls, 2 * N * IC * OC,
          a * (N * IC + N * OC) + 2 * f * IC * OC);
  };
  // Norms over (N, C), two per block + the final one. LayerNorm forward writes out and fp32
  // mean, rstd; RMSNorm out and rstd. Backward dX reads dout, inp and accumulates into dinp;
  // dW (LayerNorm: and db) reads dout, inp again and accumulates fp32 (C) sums.
  const double ln_calls = (2 * L + 1) * mb;
  const double stats = llama ? 1 : 2;  // fp32 per-row statistics
  // RoPE rotates this rank's q and k heads in place: read and write (N, Cl + KVl); about six
  // FLOPs per element (the angle's sine and cosine, two products and a sum).
  auto rope = [&](const char* name) {
    b.add(name, "block", Unit::Vector, Lm, 6 * N * (Cl + KVl), 2 * a * N * (Cl + KVl));
  };

  // ---- forward ---------------------------------------------------------------------------
  if (llama)
    b.add("embedding fwd (wte rows)", "embedding", Unit::Vector, mb, 0,
          f * N + a * (N * C / tp + N * C));
  else
    b.add("embedding fwd (wte + wpe rows)", "embedding", Unit::Vector, mb, N * C,
          f * N + a * (N * C / tp + T * C + N * C));
  b.add(norm + " fwd", "block", Unit::Vector, ln_calls, (llama ? 4 : 8) * N * C,
        a * (2 * N * C + (llama ? 1 : 2) * C) + stats * f * N);
  gemm_fwd("qkv", C, QKVl, !llama, "block", Lm);
  if (llama) rope("RoPE fwd (q, k)");
  // Flash attention: 4 B H T^2 hd for QK^T and PV, halved by the causal mask; query heads
  // share their group's k and v rows (read once).
  b.add("attention fwd (flash)", "block", Unit::Attention, Lm, 2 * B * NHl * T * T * hd,
        a * (QKVl * N + N * Cl) + f * rows);
  gemm_fwd("attn proj", Cl, C, false, "block", Lm);
  if (llama)
    b.add("residual add", "block", Unit::Vector, 2 * Lm, N * C, 3 * a * N * C);
  else
    b.add("bias + residual", "block", Unit::Vector, 2 * Lm, 2 * N * C, a * (3 * N * C + C));
  gemm_fwd("fc", C, FCl, !llama, "block", Lm);
  if (llama)  // silu(g) * u: reads g, u, writes (N, Hl)
    b.add("SwiGLU fwd", "block", Unit::Vector, Lm, 6 * N * Hl, 3 * a * N * Hl);
  else
    b.add("GELU fwd", "block", Unit::Vector, Lm, 10 * N * Hl, 2 * a * N * Hl);
  gemm_fwd("fc proj", Hl, C, false, "block", Lm);
  gemm_fwd("classifier logits", C, Vl, false, "head", mb);
  b.add("cross-entropy row max, sums", "head", Unit::Vector, mb, 4 * N * Vl,
        a * N * Vl + f * N + 3 * f * N);
  b.add("cross-entropy loss", "head", Unit::Vector, mb, 2 * N, 4 * f * N);

  // ---- backward --------------------------------------------------------------------------
  b.add("cross-entropy bwd (in place)", "head", Unit::Vector, mb, 4 * N * Vl,
        2 * a * N * Vl + 4 * f * N);
  // dW (Vl, C) += dlogits^T x; dx = dlogits W.
  b.add("classifier GEMM dW", "head", Unit::Tensor, mb, 2 * N * Vl * C,
        a * (N * Vl + N * C) + 2 * f * Vl * C);
  b.add("classifier GEMM dX", "head", Unit::Tensor, mb, 2 * N * Vl * C,
        a * (N * Vl + Vl * C + N * C));
  b.add("memset final-norm gradient", "head", Unit::Vector, mb, 0, a * N * C);
  gemm_bwd("fc proj", Hl, C, "block", Lm);
  if (llama) {  // reads g, u and dh, writes dg and du
    b.add("SwiGLU bwd", "block", Unit::Vector, Lm, 10 * N * Hl, 5 * a * N * Hl);
  } else {
    b.add("bias grad (attn proj, fc proj)", "block", Unit::Vector, 2 * Lm, N * C,
          a * N * C + 2 * f * C);
    b.add("GELU bwd", "block", Unit::Vector, Lm, 12 * N * Hl, 3 * a * N * Hl);
  }
  gemm_bwd("fc", C, FCl, "block", Lm);
  if (!llama) b.add("bias grad (fc)", "block", Unit::Vector, Lm, N * Hl, a * N * Hl + 2 * f * Hl);
  b.add("copy residual gradient", "block", Unit::Vector, 2 * Lm, 0, 2 * a * N * C);
  b.add(norm + " bwd dX", "block", Unit::Vector, ln_calls, (llama ? 8 : 10) * N * C,
        a * (4 * N * C + C) + stats * f * N);
  b.add(norm + (llama ? " bwd dW" : " bwd dW, db"), "block", Unit::Vector, ln_calls,
        (llama ? 2 : 4) * N * C, 2 * a * N * C + stats * f * N + (llama ? 2 : 4) * f * C);
  gemm_bwd("attn proj", Cl, C, "block", Lm);
  b.add("attention bwd delta = rowsum(dO O)", "block", Unit::Vector, Lm, 2 * N * Cl,
        2 * a * N * Cl + f * rows);
  // dQ recomputes S = QK^T and dP = dO V^T and forms dQ = dS K: 3 matmuls; dK, dV recomputes
  // S and dP and forms dV = P^T dO, dK = dS^T Q: 4. Each 2 B H T^2 hd, halved by the mask.
  // Bytes: dQ reads q, k, v, dO and writes dq; dK, dV reads q, k, v, dO and writes dk, dv.
  b.add("attention bwd dQ (flash)", "block", Unit::Attention, Lm, 3 * B * NHl * T * T * hd,
        a * (N * QKVl + 2 * N * Cl) + 2 * f * rows);
  b.add("attention bwd dK, dV (flash)", "block", Unit::Attention, Lm, 4 * B * NHl * T * T * hd,
        a * (N * QKVl + N * Cl + 2 * N * KVl) + 2 * f * rows);
  if (llama) rope("RoPE bwd (dq, dk)");
  gemm_bwd("qkv", C, QKVl, "block", Lm);
  if (!llama)
    b.add("bias grad (qkv)", "block", Unit::Vector, Lm, N * QKVl, a * N * QKVl + 2 * f * QKVl);
  // dwte: each distinct token's row read and written once (at most min(N, Vl) rows).
  b.add("embedding bwd (wte)", "embedding", Unit::Vector, mb, N * C,
        a * N * C + f * N + 2 * f * std::min(N, Vl) * C);
  if (!llama)
    b.add("embedding bwd (wpe)", "embedding", Unit::Vector, mb, N * C, a * N * C + 2 * f * T * C);

  // ---- optimizer step: this rank's parameters, fp32 -------------------------------------
  // Per layer: the weights, GPT-2's biases (QKVl + C + Hl + C) and the norms' gains (and
  // biases); the non-layer tensors: wte (and lm_head), wpe, the final norm.
  const double weights = C * QKVl + Cl * C + C * FCl + Hl * C;
  const double per_layer = weights + (llama ? 2 * C : QKVl + Hl + 2 * C + 4 * C);
  const double P = L * per_layer + Vl * C * (m.tie_embeddings ? 1 : 2) +
                   (llama ? C : double(m.positions()) * C + 2 * C);
  const double tensors = (llama ? 6 * L + 2 : 12 * L + 4) + (m.tie_embeddings ? 0 : 1);
  k.params = P;
  b.add("memset gradients", "optimizer", Unit::Vector, 1, 0, f * P);
  b.add("gradient norm (sum of squares)", "optimizer", Unit::Vector, 2 * tensors,
        2 * P / (2 * tensors), f * P / (2 * tensors));
  // Reads master, grad, m, v; writes master, m, v.
  b.add("AdamW", "optimizer", Unit::Vector, tensors, 14 * P / tensors, 7 * f * P / tensors);
  if (s.act_bytes < 4)  // the compute copy: fp32 master read, 2-byte copy written
    b.add("cast master to compute copy", "optimizer", Unit::Vector, 1, P, (f + a) * P);

  for (const KernelCost& c : k.kernels) {
    k.flops += c.flops;
    k.bytes += c.bytes;
    k.roofline_s += c.time_s;
    k.launches += c.calls;
  }
  k.launch_s = k.launches * g.launch_s;
  k.step_s = k.roofline_s + k.launch_s;
  k.tokens = N * mb;
  k.model_flops = flops_per_token(m) * k.tokens / tp;
  k.mfu = k.model_flops / (k.step_s * g.tensor_flops);
  k.mfu_roofline = k.model_flops / (k.roofline_s * g.tensor_flops);
  return k;
}

}  // namespace loom::plan
