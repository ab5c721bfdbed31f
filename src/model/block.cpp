// Transformer block forward/backward over a Backend's kernels, with TP all-reduces.
#include "model/block.h"

#include <cstdint>

namespace loom {

namespace {
// Lays out one BlockActs (the attention state in `shared_att` when given); returns its bytes.
size_t carve_acts(BlockActs& a, void* base, const BlockDims& d, const ActFormat& f, bool with_att,
                  float* shared_att) {
  const size_t n = size_t(d.N()), e = f.act;
  Carver c(base, f.align);
  a.ln1 = c.take(n * d.C * e);
  a.ln1_mean = c.floats(n);
  a.ln1_rstd = c.floats(n);
  a.qkv = c.take(n * 3 * d.Cl() * e);
  a.att = with_att ? c.floats(f.att_saved) : shared_att;
  a.atty = c.take(n * d.Cl() * e);
  a.res2 = c.take(n * d.C * e);
  a.ln2 = c.take(n * d.C * e);
  a.ln2_mean = c.floats(n);
  a.ln2_rstd = c.floats(n);
  a.fch = c.take(n * d.Hl() * e);
  a.fchg = c.take(n * d.Hl() * e);
  return c.used();
}

size_t carve_scratch(BlockScratch& s, void* base, const BlockDims& d, const ActFormat& f) {
  const size_t n = size_t(d.N()), e = f.act;
  Carver c(base, f.align);
  s.proj = c.take(n * d.C * e);
  s.dres2 = c.take(n * d.C * e);
  s.dln = c.take(n * d.C * e);
  s.dfchg = c.take(n * d.Hl() * e);
  s.dfch = c.take(n * d.Hl() * e);
  s.datty = c.take(n * d.Cl() * e);
  s.dqkv = c.take(n * 3 * d.Cl() * e);
  s.datt = c.floats(f.att_scratch);
  return c.used();
}

ActFormat cpu_format(const BlockDims& d) {
  const size_t att = size_t(d.B) * d.NH * d.T * d.T;
  return ActFormat{4, att, att, 4};
}
}  // namespace

ActFormat act_format(const Backend& be, const BlockDims& d) {
  return ActFormat{be.act_size(), be.attention_saved_floats(d.B, d.NH, d.T),
                   be.attention_scratch_floats(d.B, d.NH, d.T),
                   be.device() == Device::CPU ? size_t(4) : size_t(16)};
}

size_t BlockDims::acts_bytes(const ActFormat& f, bool with_att) const {
  BlockActs a;
  return carve_acts(a, nullptr, *this, f, with_att, nullptr);
}

size_t BlockDims::acts_floats(bool with_att) const {
  return acts_bytes(cpu_format(*this), with_att) / 4;
}

size_t BlockScratch::bytes(const BlockDims& d, const ActFormat& f) {
  BlockScratch s;
  return carve_scratch(s, nullptr, d, f);
}

size_t BlockScratch::floats(const BlockDims& d) { return bytes(d, cpu_format(d)) / 4; }

BlockActs block_acts_at(void* base, const BlockDims& d, const ActFormat& f, float* shared_att) {
  BlockActs a;
  carve_acts(a, base, d, f, shared_att == nullptr, shared_att);
  return a;
}

BlockScratch block_scratch_at(void* base, const BlockDims& d, const ActFormat& f) {
  BlockScratch s;
  carve_scratch(s, base, d, f);
  return s;
}

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

void block_forward(Backend& be, void* out, const void* x, const BlockWeights& w, const BlockActs& a,
                   const BlockScratch& s, const BlockDims& d, Comm& tp) {
  const int N = d.N(), C = d.C, Cl = d.Cl(), Hl = d.Hl();
  // Attention: ln1 -> qkv (column-parallel; f is identity forward) -> attention -> proj (row).
  be.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, N, C);
  be.matmul_forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, N, C, 3 * Cl);
  be.attention_forward(a.atty, a.att, a.qkv, d.B, d.T, Cl, d.NH);
  row_parallel_residual(be, a.res2, x, a.atty, w.proj_w, w.proj_b, s.proj, N, Cl, C, tp);
  // MLP: ln2 -> c_fc (column) -> GELU -> c_proj (row).
  be.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2_w, w.ln2_b, N, C);
  be.matmul_forward(a.fch, a.ln2, w.fc_w, w.fc_b, N, C, Hl);
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
  be.gelu_backward(s.dfch, a.fch, s.dfchg, size_t(N) * Hl);
  be.matmul_backward(s.dln, g.fc_w, g.fc_b, s.dfch, a.ln2, w.fc_w, N, C, Hl);
  tp.all_reduce(s.dln, NC, t, ReduceOp::Sum);  // f: all-reduce backward
  be.copy(s.dres2, dout, NC * be.act_size());
  be.layernorm_backward(s.dres2, g.ln2_w, g.ln2_b, s.dln, a.res2, w.ln2_w, a.ln2_mean, a.ln2_rstd,
                        N, C);
  // Attention.
  be.matmul_backward(s.datty, g.proj_w, g.proj_b, s.dres2, a.atty, w.proj_w, N, Cl, C);
  be.attention_backward(s.dqkv, s.datt, s.datty, a.qkv, a.atty, a.att, d.B, d.T, Cl, d.NH);
  be.matmul_backward(s.dln, g.qkv_w, g.qkv_b, s.dqkv, a.ln1, w.qkv_w, N, C, 3 * Cl);
  tp.all_reduce(s.dln, NC, t, ReduceOp::Sum);
  be.copy(dx, s.dres2, NC * be.act_size());
  be.layernorm_backward(dx, g.ln1_w, g.ln1_b, s.dln, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, N, C);
}

}  // namespace loom
