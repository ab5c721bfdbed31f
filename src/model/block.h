// One pre-LN transformer block with Megatron tensor parallelism: column-parallel qkv and
// mlp.c_fc, row-parallel attn.c_proj and mlp.c_proj, all-reduces at the conjugate f/g points.
#pragma once
#include "parallel/comm.h"

namespace loom {

// Pointers to one layer's (local shard of) parameters, or to their gradients.
struct BlockWeights {
  float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
  float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
};

// Activations of one layer for one micro-batch, kept from forward for backward.
struct BlockActs {
  float *ln1, *ln1_mean, *ln1_rstd;  // (N, C), (N), (N)
  float* qkv;                        // (N, 3*Cl) local heads: [q | k | v]
  float* att;                        // (B, NHl, T, T) attention probabilities
  float* atty;                       // (N, Cl) attention output before the projection
  float* res2;                       // (N, C) residual after attention
  float *ln2, *ln2_mean, *ln2_rstd;  // (N, C), (N), (N)
  float* fch;                        // (N, Hl) mlp hidden before GELU
  float* fchg;                       // (N, Hl) after GELU
};

struct BlockDims {
  int B, T, C, NH;  // NH: local heads
  int tp;           // tensor-parallel size; C is full, Cl = C/tp, Hl = 4C/tp
  int N() const { return B * T; }
  int Cl() const { return C / tp; }
  int Hl() const { return 4 * C / tp; }
  size_t acts_floats(bool with_att = true) const;  // floats of one BlockActs
};

// Scratch shared by all layers and micro-batches (backward of one micro-batch at a time).
struct BlockScratch {
  float* proj;     // (N, C) partial projection before the all-reduce
  float* dres2;    // (N, C)
  float* dln;      // (N, C)
  float* dfchg;    // (N, Hl)
  float* dfch;     // (N, Hl)
  float* datty;    // (N, Cl)
  float* dqkv;     // (N, 3Cl)
  float* datt;     // (B, NHl, T, T)
  static size_t floats(const BlockDims& d);
};

// Carves a BlockActs out of `base` (acts_floats() floats); with `shared_att`, the attention
// probabilities live there instead (acts_floats(false) floats from base).
BlockActs block_acts_at(float* base, const BlockDims& d, float* shared_att = nullptr);
BlockScratch block_scratch_at(float* base, const BlockDims& d);

// out (N, C) = block(x (N, C)); fills acts. `out` may not alias x.
void block_forward(float* out, const float* x, const BlockWeights& w, const BlockActs& a,
                   const BlockScratch& s, const BlockDims& d, Comm& tp);

// dx (N, C) = gradient w.r.t. x given dout (N, C); accumulates weight gradients into g.
void block_backward(float* dx, const float* dout, const float* x, const BlockWeights& w,
                    const BlockWeights& g, const BlockActs& a, const BlockScratch& s,
                    const BlockDims& d, Comm& tp);

}  // namespace loom
