// The Mixture-of-Experts feed-forward of a block (docs/moe.md): router, top-k, per-sequence
// capacity plan, the experts' GEMMs on their rows (each expert tensor-parallel like the dense
// MLP: c_fc by columns, c_proj by rows) and the gated combine, forward and backward.
#pragma once
#include "backend/backend.h"
#include "layout/block_memory.h"
#include "parallel/comm.h"

namespace loom {

template <typename P>
struct BlockTensors;

// partial (N, C) = this TP rank's share of the layer's output for the (N, C) input rows x (the
// TP ranks' shares sum to it; TP rank 0 adds the experts' c_proj bias); fills the MoE fields of
// acts and, when s.moe_loss is set, adds the layer's loss terms there. ep: the expert-parallel
// group (size d.ep; this rank holds its rank's E/ep experts), which exchanges rows all-to-all.
void moe_forward(Backend& be, void* partial, const void* x, const BlockTensors<const void*>& w,
                 const BlockActs& a, const BlockScratch& s, const BlockDims& d, Comm& tp, Comm& ep);

// The backward in two parts, so that the output gradient dy (N, C) and the input x (N, C) may
// share a buffer (sequence parallelism gathers both into one): first through the combine
// (reads dy; the gate gradient is summed over TP; the experts' bias gradient comes later), then dx
// (N, C) = this TP rank's share of the input rows' gradient (summed over TP by the caller, as a
// column-parallel input gradient) from the experts and the router. Both accumulate weight gradients
// into g.
void moe_backward_combine(Backend& be, const void* dy, const BlockTensors<const void*>& w,
                          const BlockTensors<float*>& g, const BlockActs& a, const BlockScratch& s,
                          const BlockDims& d, Comm& tp);
void moe_backward_experts(Backend& be, void* dx, const void* x, const BlockTensors<const void*>& w,
                          const BlockTensors<float*>& g, const BlockActs& a, const BlockScratch& s,
                          const BlockDims& d, Comm& tp, Comm& ep);

}  // namespace loom
