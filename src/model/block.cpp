// Transformer block forward/backward over the cpu kernels, with TP all-reduces.
#include "model/block.h"

#include <cstring>

#include "kernels/attention.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"

namespace loom {

size_t BlockDims::acts_floats() const {
  size_t n = size_t(N());
  return n * C * 3 + n * 4 + n * 3 * Cl() + size_t(B) * NH * T * T + n * Cl() + n * 2 * Hl();
}

size_t BlockScratch::floats(const BlockDims& d) {
  size_t n = size_t(d.N());
  return n * d.C * 3 + n * 2 * d.Hl() + n * d.Cl() + n * 3 * d.Cl() + size_t(d.B) * d.NH * d.T * d.T;
}

BlockActs block_acts_at(float* p, const BlockDims& d) {
  size_t n = size_t(d.N());
  BlockActs a;
  a.ln1 = p, p += n * d.C;
  a.ln1_mean = p, p += n;
  a.ln1_rstd = p, p += n;
  a.qkv = p, p += n * 3 * d.Cl();
  a.att = p, p += size_t(d.B) * d.NH * d.T * d.T;
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
// Row-parallel output: partial (N, C) summed over TP ranks, then the replicated bias.
void reduce_add_bias(float* y, const float* bias, int N, int C, Comm& tp) {
  tp.all_reduce(y, size_t(N) * C, ReduceOp::Sum);  // g: all-reduce forward
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) y[size_t(n) * C + c] += bias[c];
}
}  // namespace

void block_forward(float* out, const float* x, const BlockWeights& w, const BlockActs& a,
                   const BlockScratch& s, const BlockDims& d, Comm& tp) {
  const int N = d.N(), C = d.C, Cl = d.Cl(), Hl = d.Hl();
  const size_t NC = size_t(N) * C;
  // Attention: ln1 -> qkv (column-parallel; f is identity forward) -> attention -> proj (row).
  cpu::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, N, C);
  cpu::matmul_forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, N, C, 3 * Cl);
  cpu::attention_forward(a.atty, a.att, a.qkv, d.B, d.T, Cl, d.NH);
  cpu::matmul_forward(s.proj, a.atty, w.proj_w, nullptr, N, Cl, C);
  reduce_add_bias(s.proj, w.proj_b, N, C, tp);
  cpu::residual_forward(a.res2, x, s.proj, NC);
  // MLP: ln2 -> c_fc (column) -> GELU -> c_proj (row).
  cpu::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2_w, w.ln2_b, N, C);
  cpu::matmul_forward(a.fch, a.ln2, w.fc_w, w.fc_b, N, C, Hl);
  cpu::gelu_forward(a.fchg, a.fch, size_t(N) * Hl);
  cpu::matmul_forward(s.proj, a.fchg, w.fcproj_w, nullptr, N, Hl, C);
  reduce_add_bias(s.proj, w.fcproj_b, N, C, tp);
  cpu::residual_forward(out, a.res2, s.proj, NC);
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
