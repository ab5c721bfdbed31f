// Mixture-of-Experts feed-forward: routing on the backend's MoE kernels, the experts' grouped
// GEMMs on their rows (with expert parallelism after an all-to-all that takes each row to the rank
// holding its expert, and back), the gated combine.
#include "model/moe_layer.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "model/block.h"

namespace loom {

namespace {
cpu::MoeDims moe_dims(const BlockDims& d) { return cpu::MoeDims{d.B, d.T, d.E, d.k, d.cap}; }

// The loss weights of the step's backward: per token (dloss) and per sequence (dloss * T).
double tok_grad(const BlockScratch& s) { return double(s.moe_dloss); }
double seq_grad(const BlockScratch& s, const BlockDims& d) { return double(s.moe_dloss) * d.T; }

// Rows [row, row + rows) of the expert side's buffers belong to this rank's expert `expert`.
using Segment = cpu::GemmSegment;

// Where the rows of one micro-batch go. Own side: this rank's M rows in expert order (the plan's
// offsets). Expert side: the R rows this rank's experts compute. With ep = 1 the two are the
// same rows; with expert parallelism rank j of the ep group receives, from every rank in order,
// its rows for experts [j*El, (j+1)*El), and the counts say how many floats (rows * C) go
// where.
struct Dispatch {
  int M = 0, R = 0;
  std::vector<Segment> segs;                            // expert side, in row order
  std::vector<int> scounts, sdispls, rcounts, rdispls;  // all-to-all, in floats
};

Dispatch make_dispatch(Backend& be, const BlockActs& a, const BlockDims& d, Comm& ep) {
  const int E = d.E, El = d.El(), n_ep = ep.size(), me = ep.rank();
  std::vector<int32_t> off(size_t(E) + 1);
  be.to_host(off.data(), a.moe_offsets, off.size() * sizeof(int32_t));
  Dispatch p;
  p.M = off[size_t(E)];
  if (n_ep == 1) {
    for (int e = 0; e < E; ++e)
      if (off[size_t(e) + 1] > off[size_t(e)])
        p.segs.push_back({off[size_t(e)], off[size_t(e) + 1] - off[size_t(e)], e});
    p.R = p.M;
    return p;
  }
  // Every rank's rows per expert: counts (n_ep, E).
  std::vector<int32_t> mine(static_cast<size_t>(E)), all(static_cast<size_t>(n_ep) * E);
  for (int e = 0; e < E; ++e) mine[size_t(e)] = off[size_t(e) + 1] - off[size_t(e)];
  ep.all_gather(mine.data(), all.data(), size_t(E));
  const int C = d.C;
  for (int j = 0; j < n_ep; ++j) {
    p.sdispls.push_back(off[size_t(j) * El] * C);
    p.scounts.push_back((off[size_t(j + 1) * El] - off[size_t(j) * El]) * C);
  }
  for (int src = 0; src < n_ep; ++src) {
    p.rdispls.push_back(p.R * C);
    for (int e = 0; e < El; ++e) {
      const int rows = all[size_t(src) * E + size_t(me) * El + e];
      if (rows > 0) p.segs.push_back({p.R, rows, e});
      p.R += rows;
    }
    p.rcounts.push_back(p.R * C - p.rdispls.back());
  }
  LOOM_CHECK(p.R <= d.Rmax(), "expert rows ", p.R, " above the bound ", d.Rmax(), " on ",
             ep.describe());
  return p;
}

// Own rows (M, C) -> expert side (R, C), and back.
void dispatch_rows(Comm& ep, const Dispatch& p, const void* own, void* expert) {
  ep.all_to_allv(static_cast<const float*>(own), p.scounts, p.sdispls, static_cast<float*>(expert),
                 p.rcounts, p.rdispls);
}
void return_rows(Comm& ep, const Dispatch& p, const void* expert, void* own) {
  ep.all_to_allv(static_cast<const float*>(expert), p.rcounts, p.rdispls, static_cast<float*>(own),
                 p.scounts, p.sdispls);
}
}  // namespace

void moe_forward(Backend& be, void* partial, const void* x, const BlockWeights& w,
                 const BlockActs& a, const BlockScratch& s, const BlockDims& d, Comm& tp,
                 Comm& ep) {
  LOOM_CHECK(!be.lowp(), "Mixture of Experts runs in fp32 (the router and its plan)");
  const cpu::MoeDims md = moe_dims(d);
  const int N = d.N(), C = d.C, E = d.E, FCl = d.FCl(), Hl = d.Hl();
  // Router (replicated on every TP rank, so every rank routes alike), top-k, plan.
  be.matmul_forward(s.moe_logits, x, w.router_w, nullptr, N, C, E);
  be.moe_router_forward(a.moe_probs, a.moe_lse, a.moe_choice, a.moe_gate, s.moe_logits, md);
  const int M = be.moe_plan(a.moe_slot, a.moe_offsets, a.moe_rows, a.moe_counts, a.moe_choice, md);
  if (s.moe_loss)
    be.moe_losses(s.moe_loss, a.moe_probs, a.moe_lse, a.moe_counts, md, d.aux_coef, d.z_coef,
                  s.moe_seq_weight, s.moe_tok_weight);
  be.moe_gather_rows(s.moe_x, x, a.moe_rows, M, C);
  const Dispatch p = make_dispatch(be, a, d, ep);
  LOOM_CHECK(p.M == M, "MoE plan of ", M, " rows read back as ", p.M);
  // The experts on their rows: (R, C) -> (R, FCl) -> act -> (R, Hl) -> (R, C) partial, with the
  // c_proj bias once over TP (the partials are summed).
  const bool xp = ep.size() > 1;
  const void* xr = s.moe_x;
  if (xp) dispatch_rows(ep, p, s.moe_x, a.moe_xr), xr = a.moe_xr;
  void* yr = xp ? s.moe_yr : a.moe_y;
  be.grouped_matmul_forward(a.fch, xr, w.fc_w, w.fc_b, p.segs, C, FCl);
  if (d.gated)
    be.swiglu_forward(a.fchg, a.fch, p.R, Hl);
  else
    be.gelu_forward(a.fchg, a.fch, size_t(p.R) * Hl);
  const bool bias = w.fcproj_b && tp.rank() == 0;
  be.grouped_matmul_forward(yr, a.fchg, w.fcproj_w, bias ? w.fcproj_b : nullptr, p.segs, Hl, C);
  if (xp) return_rows(ep, p, s.moe_yr, a.moe_y);
  be.moe_combine(partial, a.moe_y, nullptr, a.moe_slot, a.moe_choice, a.moe_gate, md, C);
}

void moe_backward_combine(Backend& be, const void* dy, const BlockWeights& /*w*/,
                          const BlockGrads& /*g*/, const BlockActs& a, const BlockScratch& s,
                          const BlockDims& d, Comm& tp) {
  const cpu::MoeDims md = moe_dims(d);
  // dgate is a dot with the whole expert output: this rank's partial (its c_proj bias on TP rank
  // 0), summed over TP. The bias gradient comes with the experts' c_proj backward.
  be.moe_combine_backward(s.moe_dy, s.moe_dgate, nullptr, dy, a.moe_y, nullptr, a.moe_slot,
                          a.moe_choice, a.moe_gate, md, d.C);
  tp.all_reduce(s.moe_dgate, size_t(d.N()) * d.k, ReduceOp::Sum);
}

void moe_backward_experts(Backend& be, void* dx, const void* x, const BlockWeights& w,
                          const BlockGrads& g, const BlockActs& a, const BlockScratch& s,
                          const BlockDims& d, Comm& tp, Comm& ep) {
  const cpu::MoeDims md = moe_dims(d);
  const int N = d.N(), C = d.C, E = d.E, FCl = d.FCl(), Hl = d.Hl();
  const Dispatch p = make_dispatch(be, a, d, ep);
  const bool xp = ep.size() > 1;
  // The expert side's output gradient and inputs: this rank's own rows, or those it received
  // (the inputs kept from the forward).
  const void* dyr = s.moe_dy;
  const void* xr = s.moe_x;
  if (xp) {
    dispatch_rows(ep, p, s.moe_dy, s.moe_yr);
    dyr = s.moe_yr, xr = a.moe_xr;
  } else {
    be.moe_gather_rows(s.moe_x, x, a.moe_rows, p.M, C);
  }
  // The c_proj bias gradient: dy is the same on every TP rank, so each computes it whole.
  be.grouped_matmul_backward(s.moe_dhg, g.fcproj_w, g.fcproj_b, dyr, a.fchg, w.fcproj_w, p.segs, Hl,
                             C);
  if (d.gated)
    be.swiglu_backward(s.moe_dh, s.moe_dhg, a.fch, p.R, Hl);
  else
    be.gelu_backward(s.moe_dh, a.fch, s.moe_dhg, size_t(p.R) * Hl);
  // Input gradients of the expert rows: into moe_yr (its dy was read above) with expert
  // parallelism, then back to their ranks.
  void* dxr = xp ? s.moe_yr : s.moe_dxp;
  be.grouped_matmul_backward(dxr, g.fc_w, g.fc_b, s.moe_dh, xr, w.fc_w, p.segs, C, FCl);
  if (xp) return_rows(ep, p, s.moe_yr, s.moe_dxp);
  be.zero(dx, size_t(N) * C * be.act_size());
  be.moe_scatter_add_rows(dx, s.moe_dxp, a.moe_rows, a.moe_slot, md, p.M, C);
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
