// Transformer block forward/backward over the cpu kernels, with TP all-reduces.
#include "model/block.h"

#include <cstring>

#include "kernels/attention.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

namespace loom {

size_t BlockDims::acts_floats(bool with_att) const {
  size_t n = size_t(N());
  return n * C * 3 + n * 4 + n * 3 * Cl() + (with_att ? size_t(B) * NH * T * T : 0) + n * Cl() +
         n * 2 * Hl();
}

size_t BlockScratch::floats(const BlockDims& d) {
  size_t n = size_t(d.N());
  return n * d.C * 3 + n * 2 * d.Hl() + n * d.Cl() + n * 3 * d.Cl() + size_t(d.B) * d.NH * d.T * d.T;
}

BlockActs block_acts_at(float* p, const BlockDims& d, float* shared_att) {
  size_t n = size_t(d.N());
  BlockActs a;
  a.ln1 = p, p += n * d.C;
  a.ln1_mean = p, p += n;
  a.ln1_rstd = p, p += n;
  a.qkv = p, p += n * 3 * d.Cl();
  if (shared_att) {
    a.att = shared_att;
  } else {
    a.att = p, p += size_t(d.B) * d.NH * d.T * d.T;
  }
  a.atty = p, p += n * d.Cl();
  a.res2 = p, p += n * d.C;
  a.ln2 = p, p += n * d.C;
  a.ln2_mean = p, p += n;
  a.ln2_rstd = p, p += n;
  a.fch = p, p += n * d.Hl();
  a.fchg = p;
  return a;
}

BlockScratch block_scratch_at(float* p, const BlockDims& d) {
  size_t n = size_t(d.N());
  BlockScratch s;
  s.proj = p, p += n * d.C;
  s.dres2 = p, p += n * d.C;
  s.dln = p, p += n * d.C;
  s.dfchg = p, p += n * d.Hl();
  s.dfch = p, p += n * d.Hl();
  s.datty = p, p += n * d.Cl();
  s.dqkv = p, p += n * 3 * d.Cl();
  s.datt = p;
  return s;
}

namespace {
// out (N, C) = resid + bias + inp (N, K) @ W (K, C): the row-parallel projection, summed over TP
// ranks (g: all-reduce forward), its replicated bias and the residual, in one pass over out.
// The sum order resid + (partial + bias) is the same for every TP size: accumulating the GEMM
// straight into resid + bias on one rank was measured to double the TP-vs-single weight drift.
void row_parallel_residual(float* out, const float* resid, const float* inp, const float* W,
                           const float* bias, float* partial, int N, int K, int C, Comm& tp) {
  cpu::matmul_forward(partial, inp, W, nullptr, N, K, C);
  tp.all_reduce(partial, size_t(N) * C, ReduceOp::Sum);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* r = resid + size_t(n) * C;   // (C)
    const float* p = partial + size_t(n) * C;  // (C)
    float* o = out + size_t(n) * C;            // (C)
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = r[c] + (p[c] + bias[c]);
  }
}
}  // namespace

void block_forward(float* out, const float* x, const BlockWeights& w, const BlockActs& a,
                   const BlockScratch& s, const BlockDims& d, Comm& tp) {
  const int N = d.N(), C = d.C, Cl = d.Cl(), Hl = d.Hl();
  // Attention: ln1 -> qkv (column-parallel; f is identity forward) -> attention -> proj (row).
  cpu::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, N, C);
  cpu::matmul_forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, N, C, 3 * Cl);
  cpu::attention_forward(a.atty, a.att, a.qkv, d.B, d.T, Cl, d.NH);
  row_parallel_residual(a.res2, x, a.atty, w.proj_w, w.proj_b, s.proj, N, Cl, C, tp);
  // MLP: ln2 -> c_fc (column) -> GELU -> c_proj (row).
  cpu::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2_w, w.ln2_b, N, C);
  cpu::matmul_forward(a.fch, a.ln2, w.fc_w, w.fc_b, N, C, Hl);
  cpu::gelu_forward(a.fchg, a.fch, size_t(N) * Hl);
  row_parallel_residual(out, a.res2, a.fchg, w.fcproj_w, w.fcproj_b, s.proj, N, Hl, C, tp);
}

void block_backward(float* dx, const float* dout, const float* x, const BlockWeights& w,
                    const BlockWeights& g, const BlockActs& a, const BlockScratch& s,
                    const BlockDims& d, Comm& tp) {
  const int N = d.N(), C = d.C, Cl = d.Cl(), Hl = d.Hl();
  const size_t NC = size_t(N) * C;
  // MLP. dout is replicated over TP (g's backward is the identity).
  cpu::matmul_backward(s.dfchg, g.fcproj_w, g.fcproj_b, dout, a.fchg, w.fcproj_w, N, Hl, C);
  cpu::gelu_backward(s.dfch, a.fch, s.dfchg, size_t(N) * Hl);
  cpu::matmul_backward(s.dln, g.fc_w, g.fc_b, s.dfch, a.ln2, w.fc_w, N, C, Hl);
  tp.all_reduce(s.dln, NC, ReduceOp::Sum);  // f: all-reduce backward
  std::memcpy(s.dres2, dout, NC * sizeof(float));
  cpu::layernorm_backward(s.dres2, g.ln2_w, g.ln2_b, s.dln, a.res2, w.ln2_w, a.ln2_mean,
                          a.ln2_rstd, N, C);
  // Attention.
  cpu::matmul_backward(s.datty, g.proj_w, g.proj_b, s.dres2, a.atty, w.proj_w, N, Cl, C);
  cpu::attention_backward(s.dqkv, s.datt, s.datty, a.qkv, a.att, d.B, d.T, Cl, d.NH);
  cpu::matmul_backward(s.dln, g.qkv_w, g.qkv_b, s.dqkv, a.ln1, w.qkv_w, N, C, 3 * Cl);
  tp.all_reduce(s.dln, NC, ReduceOp::Sum);
  std::memcpy(dx, s.dres2, NC * sizeof(float));
  cpu::layernorm_backward(dx, g.ln1_w, g.ln1_b, s.dln, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, N, C);
}

}  // namespace loom
