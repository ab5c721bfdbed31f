// Transformer block forward/backward over a Backend's kernels, with TP all-reduces.
#include "model/block.h"

#include <cstdint>

namespace loom {

namespace {
// out (N, C) = resid + (inp (N, K) @ W (K, C) + bias): the row-parallel projection, summed over
// TP ranks (g: all-reduce forward), its replicated bias and the residual, in one pass over out.
// The sum order resid + (partial + bias) is the same for every TP size: accumulating the GEMM
// straight into resid + bias on one rank was measured to double the TP-vs-single weight drift.
void row_parallel_residual(Backend& be, void* out, const void* resid, const void* inp,
                           const void* W, const void* bias, void* partial, int N, int K, int C,
                           Comm& tp) {
  be.matmul_forward(partial, inp, W, nullptr, N, K, C);
  tp.all_reduce(partial, size_t(N) * C, be.act_dtype(), ReduceOp::Sum);
  be.bias_residual(out, resid, partial, bias, N, C);
}
}  // namespace

void norm_forward(Backend& be, void* out, float* mean, float* rstd, const void* x, const void* w,
                  const void* b, const BlockDims& d) {
  if (d.gated)
    be.rmsnorm_forward(out, rstd, x, w, d.N(), d.C, d.eps);
  else
    be.layernorm_forward(out, mean, rstd, x, w, b, d.N(), d.C);
}

void norm_backward(Backend& be, void* dinp, float* dw, float* db, const void* dout, const void* x,
                   const void* w, const float* mean, const float* rstd, const BlockDims& d) {
  if (d.gated)
    be.rmsnorm_backward(dinp, dw, dout, x, w, rstd, d.N(), d.C);
  else
    be.layernorm_backward(dinp, dw, db, dout, x, w, mean, rstd, d.N(), d.C);
}

void fill_rope_tables(Backend& be, const BlockScratch& s, const BlockDims& d) {
  if (d.gated) be.rope_table(s.rope_cos, s.rope_sin, d.T, d.D(), d.theta);
}

void block_forward(Backend& be, void* out, const void* x, const BlockWeights& w, const BlockActs& a,
                   const BlockScratch& s, const BlockDims& d, Comm& tp) {
  const int N = d.N(), C = d.C, Cl = d.Cl(), Hl = d.Hl();
  // Attention: norm -> qkv (column-parallel; f is identity forward) [-> RoPE] -> attention ->
  // proj (row).
  norm_forward(be, a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, d);
  be.matmul_forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, N, C, d.QKVl());
  if (d.gated) be.rope_forward(a.qkv, s.rope_cos, s.rope_sin, d.B, d.T, d.NH, d.KV(), d.D());
  be.attention_forward(a.atty, a.att, a.qkv, d.B, d.T, d.NH, d.KV(), d.D());
  row_parallel_residual(be, a.res2, x, a.atty, w.proj_w, w.proj_b, s.proj, N, Cl, C, tp);
  // MLP: norm -> c_fc (column) -> GELU, or SwiGLU of [gate | up] -> c_proj (row).
  norm_forward(be, a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2_w, w.ln2_b, d);
  be.matmul_forward(a.fch, a.ln2, w.fc_w, w.fc_b, N, C, d.FCl());
  if (d.gated)
    be.swiglu_forward(a.fchg, a.fch, N, Hl);
  else
    be.gelu_forward(a.fchg, a.fch, size_t(N) * Hl);
  row_parallel_residual(be, out, a.res2, a.fchg, w.fcproj_w, w.fcproj_b, s.proj, N, Hl, C, tp);
}

void block_backward(Backend& be, void* dx, const void* dout, const void* x, const BlockWeights& w,
                    const BlockGrads& g, const BlockActs& a, const BlockScratch& s,
                    const BlockDims& d, Comm& tp) {
  const int N = d.N(), C = d.C, Cl = d.Cl(), Hl = d.Hl();
  const size_t NC = size_t(N) * C;
  const DType t = be.act_dtype();
  // MLP. dout is replicated over TP (g's backward is the identity).
  be.matmul_backward(s.dfchg, g.fcproj_w, g.fcproj_b, dout, a.fchg, w.fcproj_w, N, Hl, C);
  if (d.gated)
    be.swiglu_backward(s.dfch, s.dfchg, a.fch, N, Hl);
  else
    be.gelu_backward(s.dfch, a.fch, s.dfchg, size_t(N) * Hl);
  be.matmul_backward(s.dln, g.fc_w, g.fc_b, s.dfch, a.ln2, w.fc_w, N, C, d.FCl());
  tp.all_reduce(s.dln, NC, t, ReduceOp::Sum);  // f: all-reduce backward
  be.copy(s.dres2, dout, NC * be.act_size());
  norm_backward(be, s.dres2, g.ln2_w, g.ln2_b, s.dln, a.res2, w.ln2_w, a.ln2_mean, a.ln2_rstd, d);
  // Attention.
  be.matmul_backward(s.datty, g.proj_w, g.proj_b, s.dres2, a.atty, w.proj_w, N, Cl, C);
  be.attention_backward(s.dqkv, s.datt, s.datty, a.qkv, a.atty, a.att, d.B, d.T, d.NH, d.KV(),
                        d.D());
  if (d.gated) be.rope_backward(s.dqkv, s.rope_cos, s.rope_sin, d.B, d.T, d.NH, d.KV(), d.D());
  be.matmul_backward(s.dln, g.qkv_w, g.qkv_b, s.dqkv, a.ln1, w.qkv_w, N, C, d.QKVl());
  tp.all_reduce(s.dln, NC, t, ReduceOp::Sum);
  be.copy(dx, s.dres2, NC * be.act_size());
  norm_backward(be, dx, g.ln1_w, g.ln1_b, s.dln, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, d);
}

}  // namespace loom
