// Transformer block forward/backward over a Backend's kernels, with TP all-reduces (sequence
// parallel: all-gathers and reduce-scatters) and, with context parallelism, ring attention.
#include "model/block.h"

#include <cstdint>

#include "model/context_attention.h"
#include "model/moe_layer.h"

namespace loom {

namespace {
// out = resid + (inp (N, K) @ W (K, C) + bias): the row-parallel projection, summed over TP
// ranks (g: all-reduce forward; with sequence parallelism a reduce-scatter, so out and resid are
// this rank's (Ns, C) rows), its replicated bias and the residual, in one pass over out.
// The sum order resid + (partial + bias) is the same for every TP size: accumulating the GEMM
// straight into resid + bias on one rank was measured to double the TP-vs-single weight drift.
// out = resid + (sum over TP of partial (N, C) + bias): g's all-reduce, or with sequence
// parallelism its reduce-scatter to this rank's rows. partial is overwritten.
void reduce_residual(Backend& be, void* out, const void* resid, void* partial, const void* bias,
                     const BlockScratch& s, const BlockDims& d, Comm& tp) {
  const int N = d.N(), C = d.C;
  if (d.sp) {
    tp.reduce_scatter(partial, s.shard, size_t(d.Ns()) * C, be.act_dtype());
    be.bias_residual(out, resid, s.shard, bias, d.Ns(), C);
    return;
  }
  tp.all_reduce(partial, size_t(N) * C, be.act_dtype(), ReduceOp::Sum);
  be.bias_residual(out, resid, partial, bias, N, C);
}

void row_parallel_residual(Backend& be, void* out, const void* resid, const void* inp,
                           const void* W, const void* bias, const BlockScratch& s, int K,
                           const BlockDims& d, Comm& tp) {
  be.matmul_forward(s.proj, inp, W, nullptr, d.N(), K, d.C);
  reduce_residual(be, out, resid, s.proj, bias, s, d, tp);
}

// The (N, C) input of a column-parallel GEMM from a norm output: as is, or with sequence
// parallelism all-gathered from every rank's (Ns, C) rows into s.proj.
const void* gathered(Backend& be, const void* ln, const BlockScratch& s, const BlockDims& d,
                     Comm& tp) {
  if (!d.sp) return ln;
  tp.all_gather(ln, s.proj, size_t(d.Ns()) * d.C, be.act_dtype());
  return s.proj;
}

// The gradient of a norm output from the column-parallel GEMM's partial input gradient s.dln
// (N, C): all-reduced (f's backward), or with sequence parallelism reduce-scattered to this
// rank's (Ns, C) rows in s.shard.
const void* column_input_grad(Backend& be, const BlockScratch& s, const BlockDims& d, Comm& tp) {
  if (!d.sp) {
    tp.all_reduce(s.dln, size_t(d.N()) * d.C, be.act_dtype(), ReduceOp::Sum);
    return s.dln;
  }
  tp.reduce_scatter(s.dln, s.shard, size_t(d.Ns()) * d.C, be.act_dtype());
  return s.shard;
}
}  // namespace

void norm_forward(Backend& be, void* out, float* mean, float* rstd, const void* x, const void* w,
                  const void* b, const BlockDims& d) {
  if (d.gated)
    be.rmsnorm_forward(out, rstd, x, w, d.Ns(), d.C, d.eps);
  else
    be.layernorm_forward(out, mean, rstd, x, w, b, d.Ns(), d.C);
}

void norm_backward(Backend& be, void* dinp, float* dw, float* db, const void* dout, const void* x,
                   const void* w, const float* mean, const float* rstd, const BlockDims& d) {
  if (d.gated)
    be.rmsnorm_backward(dinp, dw, dout, x, w, rstd, d.Ns(), d.C);
  else
    be.layernorm_backward(dinp, dw, db, dout, x, w, mean, rstd, d.Ns(), d.C);
}

void block_forward(Backend& be, void* out, const void* x, const BlockWeights& w, const BlockActs& a,
                   const BlockScratch& s, const BlockDims& d, Comm& tp, Comm& cp, Comm& ep) {
  const int N = d.N(), C = d.C, Hl = d.Hl();
  // Attention: norm -> qkv (column-parallel; f is identity forward, or the all-gather of the
  // norm's rows) [-> RoPE] -> attention -> proj (row).
  norm_forward(be, a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, d);
  be.matmul_forward(a.qkv, gathered(be, a.ln1, s, d, tp), w.qkv_w, w.qkv_b, N, C, d.QKVl());
  if (d.gated) be.rope_forward(a.qkv, s.rope_cos, s.rope_sin, d.B, d.T, d.NH, d.KV(), d.D());
  if (d.cp > 1)
    ring_attention_forward(be, a.atty, a.att, a.qkv, s, d, cp);
  else
    be.attention_forward(a.atty, a.att, a.qkv, d.B, d.T, d.NH, d.KV(), d.D());
  row_parallel_residual(be, a.res2, x, a.atty, w.proj_w, w.proj_b, s, d.Cl(), d, tp);
  // MLP: norm -> c_fc (column) -> GELU, or SwiGLU of [gate | up] -> c_proj (row); or the
  // Mixture of Experts of moe_layer.h on the same rows, summed over TP the same way.
  norm_forward(be, a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2_w, w.ln2_b, d);
  if (d.E > 0) {
    moe_forward(be, s.dln, gathered(be, a.ln2, s, d, tp), w, a, s, d, tp, ep);
    reduce_residual(be, out, a.res2, s.dln, nullptr, s, d, tp);
    return;
  }
  be.matmul_forward(a.fch, gathered(be, a.ln2, s, d, tp), w.fc_w, w.fc_b, N, C, d.FCl());
  if (d.gated)
    be.swiglu_forward(a.fchg, a.fch, N, Hl);
  else
    be.gelu_forward(a.fchg, a.fch, size_t(N) * Hl);
  row_parallel_residual(be, out, a.res2, a.fchg, w.fcproj_w, w.fcproj_b, s, Hl, d, tp);
}

void block_backward(Backend& be, void* dx, const void* dout, const void* x, const BlockWeights& w,
                    const BlockGrads& g, const BlockActs& a, const BlockScratch& s,
                    const BlockDims& d, Comm& tp, Comm& cp, Comm& ep) {
  const int N = d.N(), C = d.C, Cl = d.Cl(), Hl = d.Hl();
  const size_t NsC = size_t(d.Ns()) * C;
  const DType t = be.act_dtype();
  // With sequence parallelism the norms see this rank's rows only: their weight gradients are
  // partial sums, collected in s.normg ([ln2_w | ln2_b | ln1_w | ln1_b]), summed over TP below
  // and only then accumulated into g, so g stays replicated over TP as without it.
  const size_t nnorm = d.gated ? 2 : 4, Cs = size_t(C);
  float* nw2 = d.sp ? s.normg : g.ln2_w;
  float* nb2 = d.sp ? (d.gated ? nullptr : s.normg + Cs) : g.ln2_b;
  float* nw1 = d.sp ? s.normg + (nnorm / 2) * Cs : g.ln1_w;
  float* nb1 = d.sp ? (d.gated ? nullptr : s.normg + 3 * Cs) : g.ln1_b;
  if (d.sp) be.zero(s.normg, nnorm * Cs * sizeof(float));
  // MLP. dout is replicated over TP (g's backward is the identity), or this rank's rows, which
  // the reduce-scatter's backward all-gathers.
  const void* dy = dout;
  if (d.sp) {
    tp.all_gather(dout, s.proj, NsC, t);
    dy = s.proj;
  }
  if (d.E > 0) {  // Mixture of Experts: dy is read before the input rows are gathered again
    moe_backward_combine(be, dy, w, g, a, s, d, tp);
    moe_backward_experts(be, s.dln, gathered(be, a.ln2, s, d, tp), w, g, a, s, d, tp, ep);
  } else {
    be.matmul_backward(s.dfchg, g.fcproj_w, g.fcproj_b, dy, a.fchg, w.fcproj_w, N, Hl, C);
    if (d.gated)
      be.swiglu_backward(s.dfch, s.dfchg, a.fch, N, Hl);
    else
      be.gelu_backward(s.dfch, a.fch, s.dfchg, size_t(N) * Hl);
    be.matmul_backward(s.dln, g.fc_w, g.fc_b, s.dfch, gathered(be, a.ln2, s, d, tp), w.fc_w, N, C,
                       d.FCl());
  }
  const void* dln = column_input_grad(be, s, d, tp);  // f: all-reduce backward
  be.copy(s.dres2, dout, NsC * be.act_size());
  norm_backward(be, s.dres2, nw2, nb2, dln, a.res2, w.ln2_w, a.ln2_mean, a.ln2_rstd, d);
  // Attention.
  const void* dy2 = s.dres2;
  if (d.sp) {
    tp.all_gather(s.dres2, s.dln, NsC, t);
    dy2 = s.dln;
  }
  be.matmul_backward(s.datty, g.proj_w, g.proj_b, dy2, a.atty, w.proj_w, N, Cl, C);
  if (d.cp > 1)
    ring_attention_backward(be, s.dqkv, s.datty, a.qkv, a.atty, a.att, s, d, cp);
  else
    be.attention_backward(s.dqkv, s.datt, s.datty, a.qkv, a.atty, a.att, d.B, d.T, d.NH, d.KV(),
                          d.D());
  if (d.gated) be.rope_backward(s.dqkv, s.rope_cos, s.rope_sin, d.B, d.T, d.NH, d.KV(), d.D());
  be.matmul_backward(s.dln, g.qkv_w, g.qkv_b, s.dqkv, gathered(be, a.ln1, s, d, tp), w.qkv_w, N, C,
                     d.QKVl());
  dln = column_input_grad(be, s, d, tp);
  be.copy(dx, s.dres2, NsC * be.act_size());
  norm_backward(be, dx, nw1, nb1, dln, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, d);
  if (!d.sp) return;
  tp.all_reduce(s.normg, nnorm * Cs, ReduceOp::Sum);
  float* dst[4] = {g.ln2_w, g.ln2_b, g.ln1_w, g.ln1_b};
  for (size_t i = 0, k = 0; i < 4; ++i)
    if (dst[i]) be.add_inplace(dst[i], s.normg + (k++) * Cs, Cs);
}

}  // namespace loom
