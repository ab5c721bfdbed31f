// One pre-norm transformer block with Megatron tensor parallelism: column-parallel qkv and
// mlp.c_fc, row-parallel attn.c_proj and mlp.c_proj, all-reduces at the conjugate f/g points;
// with sequence parallelism (BlockDims::sp) the norms and residuals run on this rank's Ns rows
// and all-gathers/reduce-scatters replace the all-reduces (docs/sequence-parallel.md).
// GPT-2 (LayerNorm, GELU, biases) or Llama (RMSNorm, RoPE on q and k, grouped-query attention,
// SwiGLU, no biases), as BlockDims::gated says. With context parallelism (BlockDims::cp) the
// rows are this rank's share of each sequence and attention is the ring of context_attention.h.
// Runs on any Backend: activations in its act dtype, statistics and weight gradients in fp32.
#pragma once
#include "backend/backend.h"
#include "layout/block_memory.h"
#include "parallel/comm.h"

namespace loom {

// One layer's tensors, in the order of the Hugging Face GPT-2 names: compute weights (const
// void*, the act dtype) or fp32 gradients (float*). Llama has no biases: they are null.
// Mixture of Experts (docs/moe.md): fc_* and fcproj_* are the experts' stacked tensors and
// router_w the router (null in a dense block).
template <typename P>
struct BlockTensors {
  P ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b;
  P ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  P router_w;
};
using BlockWeights = BlockTensors<const void*>;
using BlockGrads = BlockTensors<float*>;

// The block's normalization (LayerNorm, or RMSNorm when d.gated) of x (Ns, C): out (Ns, C), its
// statistics (mean unused by RMSNorm). The backward accumulates into dinp, dw and db (b, db null
// for RMSNorm).
void norm_forward(Backend& be, void* out, float* mean, float* rstd, const void* x, const void* w,
                  const void* b, const BlockDims& d);
void norm_backward(Backend& be, void* dinp, float* dw, float* db, const void* dout, const void* x,
                   const void* w, const float* mean, const float* rstd, const BlockDims& d);

// out (Ns, C) = block(x (Ns, C)) (Ns = N without sequence parallelism); fills acts. `out` may
// not alias x. cp: the context-parallel group (ring attention when d.cp > 1); ep: the
// expert-parallel group (Mixture of Experts with d.ep > 1).
void block_forward(Backend& be, void* out, const void* x, const BlockWeights& w, const BlockActs& a,
                   const BlockScratch& s, const BlockDims& d, Comm& tp, Comm& cp, Comm& ep);

// dx (Ns, C) = gradient w.r.t. x given dout (Ns, C); accumulates weight gradients into g.
void block_backward(Backend& be, void* dx, const void* dout, const void* x, const BlockWeights& w,
                    const BlockGrads& g, const BlockActs& a, const BlockScratch& s,
                    const BlockDims& d, Comm& tp, Comm& cp, Comm& ep);

}  // namespace loom
