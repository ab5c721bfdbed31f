// Mixture-of-Experts feed-forward: routing on the backend's MoE kernels, one GEMM per expert on
// its contiguous rows (the plan's offsets, read back to the host), the gated combine.
#include "model/moe_layer.h"

#include <vector>

#include "core/check.h"
#include "model/block.h"

namespace loom {

namespace {
cpu::MoeDims moe_dims(const BlockDims& d) { return cpu::MoeDims{d.B, d.T, d.E, d.k, d.cap}; }

char* at(void* p, size_t elems, size_t esize) { return static_cast<char*>(p) + elems * esize; }
const char* at(const void* p, size_t elems, size_t esize) {
  return static_cast<const char*>(p) + elems * esize;
}

// The experts' first rows in the permuted buffers (E + 1), on the host.
std::vector<int32_t> expert_offsets(Backend& be, const BlockActs& a, const BlockDims& d) {
  std::vector<int32_t> off(size_t(d.E) + 1);
  be.to_host(off.data(), a.moe_offsets, off.size() * sizeof(int32_t));
  return off;
}

// The loss weights of the step's backward: per token (dloss) and per sequence (dloss * T).
double tok_grad(const BlockScratch& s) { return double(s.moe_dloss); }
double seq_grad(const BlockScratch& s, const BlockDims& d) { return double(s.moe_dloss) * d.T; }
}  // namespace

void moe_forward(Backend& be, void* partial, const void* x, const BlockWeights& w,
                 const BlockActs& a, const BlockScratch& s, const BlockDims& d, Comm& tp) {
  LOOM_CHECK(!be.lowp(), "Mixture of Experts runs in fp32 (the router and its plan)");
  const cpu::MoeDims md = moe_dims(d);
  const int N = d.N(), C = d.C, E = d.E, FCl = d.FCl(), Hl = d.Hl();
  const size_t es = be.act_size();
  // Router (replicated on every TP rank, so every rank routes alike), top-k, plan.
  be.matmul_forward(s.moe_logits, x, w.router_w, nullptr, N, C, E);
  be.moe_router_forward(a.moe_probs, a.moe_lse, a.moe_choice, a.moe_gate, s.moe_logits, md);
  const int M = be.moe_plan(a.moe_slot, a.moe_offsets, a.moe_rows, a.moe_counts, a.moe_choice, md);
  if (s.moe_loss)
    be.moe_losses(s.moe_loss, a.moe_probs, a.moe_lse, a.moe_counts, md, d.aux_coef, d.z_coef,
                  s.moe_seq_weight, s.moe_tok_weight);
  // The experts on their rows: (M, C) -> (M, FCl) -> act -> (M, Hl) -> (M, C) partial.
  be.moe_gather_rows(s.moe_x, x, a.moe_rows, M, C);
  const std::vector<int32_t> off = expert_offsets(be, a, d);
  const size_t w1 = size_t(C) * FCl, w2 = size_t(Hl) * C;
  for (int e = 0; e < E; ++e) {
    const int r0 = off[size_t(e)], n = off[size_t(e) + 1] - r0;
    if (n == 0) continue;
    be.matmul_forward(at(a.fch, size_t(r0) * FCl, es), at(s.moe_x, size_t(r0) * C, es),
                      at(w.fc_w, e * w1, es), w.fc_b ? at(w.fc_b, size_t(e) * Hl, es) : nullptr, n,
                      C, FCl);
  }
  if (d.gated)
    be.swiglu_forward(a.fchg, a.fch, M, Hl);
  else
    be.gelu_forward(a.fchg, a.fch, size_t(M) * Hl);
  for (int e = 0; e < E; ++e) {
    const int r0 = off[size_t(e)], n = off[size_t(e) + 1] - r0;
    if (n == 0) continue;
    be.matmul_forward(at(a.moe_y, size_t(r0) * C, es), at(a.fchg, size_t(r0) * Hl, es),
                      at(w.fcproj_w, e * w2, es), nullptr, n, Hl, C);
  }
  // The bias once over TP (the partials are summed); replicated, so every rank has it.
  be.moe_combine(partial, a.moe_y, tp.rank() == 0 ? w.fcproj_b : nullptr, a.moe_slot, a.moe_choice,
                 a.moe_gate, md, C);
}

void moe_backward_combine(Backend& be, const void* dy, const BlockWeights& w, const BlockGrads& g,
                          const BlockActs& a, const BlockScratch& s, const BlockDims& d, Comm& tp) {
  const cpu::MoeDims md = moe_dims(d);
  // dgate is a dot with the whole expert output: this rank's partial (plus the bias on rank 0),
  // summed over TP. The bias gradient needs no sum: dy is the same on every TP rank.
  be.moe_combine_backward(s.moe_dy, s.moe_dgate, g.fcproj_b, dy, a.moe_y,
                          tp.rank() == 0 ? w.fcproj_b : nullptr, a.moe_slot, a.moe_choice,
                          a.moe_gate, md, d.C);
  tp.all_reduce(s.moe_dgate, size_t(d.N()) * d.k, ReduceOp::Sum);
}

void moe_backward_experts(Backend& be, void* dx, const void* x, const BlockWeights& w,
                          const BlockGrads& g, const BlockActs& a, const BlockScratch& s,
                          const BlockDims& d, Comm& tp) {
  const cpu::MoeDims md = moe_dims(d);
  const int N = d.N(), C = d.C, E = d.E, FCl = d.FCl(), Hl = d.Hl();
  const size_t es = be.act_size();
  const std::vector<int32_t> off = expert_offsets(be, a, d);
  const int M = off[size_t(E)];
  be.moe_gather_rows(s.moe_x, x, a.moe_rows, M, C);
  const size_t w1 = size_t(C) * FCl, w2 = size_t(Hl) * C;
  for (int e = 0; e < E; ++e) {
    const int r0 = off[size_t(e)], n = off[size_t(e) + 1] - r0;
    if (n == 0) continue;
    be.matmul_backward(at(s.moe_dhg, size_t(r0) * Hl, es), g.fcproj_w + e * w2, nullptr,
                       at(s.moe_dy, size_t(r0) * C, es), at(a.fchg, size_t(r0) * Hl, es),
                       at(w.fcproj_w, e * w2, es), n, Hl, C);
  }
  if (d.gated)
    be.swiglu_backward(s.moe_dh, s.moe_dhg, a.fch, M, Hl);
  else
    be.gelu_backward(s.moe_dh, a.fch, s.moe_dhg, size_t(M) * Hl);
  for (int e = 0; e < E; ++e) {
    const int r0 = off[size_t(e)], n = off[size_t(e) + 1] - r0;
    if (n == 0) continue;
    be.matmul_backward(at(s.moe_dxp, size_t(r0) * C, es), g.fc_w + e * w1,
                       g.fc_b ? g.fc_b + size_t(e) * Hl : nullptr,
                       at(s.moe_dh, size_t(r0) * FCl, es), at(s.moe_x, size_t(r0) * C, es),
                       at(w.fc_w, e * w1, es), n, C, FCl);
  }
  be.zero(dx, size_t(N) * C * es);
  be.moe_scatter_add_rows(dx, s.moe_dxp, a.moe_rows, a.moe_slot, md, M, C);
  // Router: through the kept gates, the balancing and the z-loss. Its input gradient is the same
  // on every TP rank: rank 0 adds it (the caller sums dx over TP).
  be.moe_router_backward(s.moe_logits, a.moe_probs, a.moe_lse, a.moe_choice, a.moe_slot,
                         s.moe_dgate, a.moe_counts, md, d.aux_coef, d.z_coef, seq_grad(s, d),
                         tok_grad(s));
  const bool mine = tp.rank() == 0;
  be.matmul_backward(mine ? s.moe_x : nullptr, g.router_w, nullptr, s.moe_logits, x, w.router_w, N,
                     C, E);
  if (mine)
    be.add_inplace(static_cast<float*>(dx), static_cast<const float*>(s.moe_x), size_t(N) * C);
}

}  // namespace loom
