// One pre-LN transformer block with Megatron tensor parallelism: column-parallel qkv and
// mlp.c_fc, row-parallel attn.c_proj and mlp.c_proj, all-reduces at the conjugate f/g points.
// Runs on any Backend: activations in its act dtype, statistics and weight gradients in fp32.
#pragma once
#include "backend/backend.h"
#include "parallel/comm.h"

namespace loom {

// Hands out consecutive sub-buffers of a base pointer, each aligned to `align` bytes; with a
// null base it only measures (used() is then the bytes to reserve).
class Carver {
 public:
  Carver(void* base, size_t align) : base_(static_cast<char*>(base)), align_(align) {}
  void* take(size_t bytes) {
    used_ = (used_ + align_ - 1) / align_ * align_;
    void* p = base_ ? base_ + used_ : nullptr;
    used_ += bytes;
    return p;
  }
  float* floats(size_t n) { return static_cast<float*>(take(n * sizeof(float))); }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t align_, used_ = 0;
};

// One layer's tensors, in the order of the Hugging Face names: compute weights (const void*,
// the act dtype) or fp32 gradients (float*).
template <typename P>
struct BlockTensors {
  P ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b;
  P ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
};
using BlockWeights = BlockTensors<const void*>;
using BlockGrads = BlockTensors<float*>;

// Activations of one layer for one micro-batch, kept from forward for backward. void*: the
// backend's act dtype.
struct BlockActs {
  void* ln1;                   // (N, C)
  float *ln1_mean, *ln1_rstd;  // (N), (N)
  void* qkv;                   // (N, 3*Cl) local heads: [q | k | v]
  float* att;                  // attention state for backward: (B, NHl, T, T) probabilities on
                               // cpu, (B, NHl, T) log-sum-exp on cuda (Backend::attention_*)
  void* atty;                  // (N, Cl) attention output before the projection
  void* res2;                  // (N, C) residual after attention
  void* ln2;                   // (N, C)
  float *ln2_mean, *ln2_rstd;  // (N), (N)
  void* fch;                   // (N, Hl) mlp hidden before GELU
  void* fchg;                  // (N, Hl) after GELU
};

// Element sizes of a block's buffers: the act dtype, the attention's saved state and scratch
// (floats), and the alignment of each sub-tensor (4 on cpu: packed as the plan model counts
// it; 16 on cuda for 128-bit loads).
struct ActFormat {
  size_t act = 4;
  size_t att_saved = 0, att_scratch = 0;  // floats
  size_t align = 4;
};

struct BlockDims {
  int B, T, C, NH;  // NH: local heads
  int tp;           // tensor-parallel size; C is full, Cl = C/tp, Hl = 4C/tp
  int N() const { return B * T; }
  int Cl() const { return C / tp; }
  int Hl() const { return 4 * C / tp; }
  size_t acts_floats(bool with_att = true) const;  // floats of one fp32 cpu BlockActs (plan)
  // Bytes of one BlockActs in format f; without the attention state when !with_att.
  size_t acts_bytes(const ActFormat& f, bool with_att) const;
};

// The act format of backend `be` for dims d.
ActFormat act_format(const Backend& be, const BlockDims& d);

// Scratch shared by all layers and micro-batches (backward of one micro-batch at a time).
struct BlockScratch {
  void* proj;                                // (N, C) partial projection before the all-reduce
  void* dres2;                               // (N, C)
  void* dln;                                 // (N, C)
  void* dfchg;                               // (N, Hl)
  void* dfch;                                // (N, Hl)
  void* datty;                               // (N, Cl)
  void* dqkv;                                // (N, 3Cl)
  float* datt;                               // attention backward scratch (cpu: (B, NHl, T, T))
  static size_t floats(const BlockDims& d);  // fp32 cpu (plan)
  static size_t bytes(const BlockDims& d, const ActFormat& f);
};

// Carves a BlockActs out of `base` (acts_bytes(f, true) bytes); with `shared_att`, the attention
// state lives there instead (acts_bytes(f, false) bytes from base).
BlockActs block_acts_at(void* base, const BlockDims& d, const ActFormat& f,
                        float* shared_att = nullptr);
BlockScratch block_scratch_at(void* base, const BlockDims& d, const ActFormat& f);

// out (N, C) = block(x (N, C)); fills acts. `out` may not alias x.
void block_forward(Backend& be, void* out, const void* x, const BlockWeights& w, const BlockActs& a,
                   const BlockScratch& s, const BlockDims& d, Comm& tp);

// dx (N, C) = gradient w.r.t. x given dout (N, C); accumulates weight gradients into g.
void block_backward(Backend& be, void* dx, const void* dout, const void* x, const BlockWeights& w,
                    const BlockGrads& g, const BlockActs& a, const BlockScratch& s,
                    const BlockDims& d, Comm& tp);

}  // namespace loom
