// Where a transformer block's buffers go: the dims of one block on one TP rank, the element
// sizes of a device (ActFormat), and the carving of one layer's activations and of the backward
// scratch out of a base pointer. With a null base the same code only measures, so the bytes
// reserved and the pointers handed out cannot disagree.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backend/device_traits.h"

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

// Activations of one layer for one micro-batch, kept from forward for backward. void*: the
// backend's act dtype.
// Ns rows: N, or this rank's N/tp rows with sequence parallelism (BlockDims::Ns()).
struct BlockActs {
  void* ln1;                   // (Ns, C)
  float *ln1_mean, *ln1_rstd;  // (Ns), (Ns); no mean for RMSNorm (null)
  void* qkv;                   // (N, QKVl) local heads: [q | k | v] (llama: q, k after RoPE)
  float* att;                  // attention state for backward: (B, NHl, T, T) probabilities on
                               // cpu, (B, NHl, T) log-sum-exp on cuda (Backend::attention_*)
  void* atty;                  // (N, Cl) attention output before the projection
  void* res2;                  // (Ns, C) residual after attention
  void* ln2;                   // (Ns, C)
  float *ln2_mean, *ln2_rstd;  // (Ns), (Ns)
  void* fch;                   // (N, FCl) mlp hidden before GELU (llama: [gate | up])
  void* fchg;                  // (N, Hl) after GELU (llama: silu(gate) * up)
  // Mixture of Experts (BlockDims::E > 0; else null, and fch/fchg hold the permuted rows):
  // the router's state and the routing plan (kernels/moe.h); moe_y (Mmax, C) holds the expert
  // outputs of this rank's rows in expert order; fch (Rmax, FCl) and fchg (Rmax, Hl) the rows
  // this rank's experts compute (its own with ep = 1; with expert parallelism those every rank
  // of the ep group sent, by source, then expert), and moe_xr (Rmax, C) their inputs (ep > 1;
  // else null).
  float *moe_probs, *moe_lse, *moe_gate;         // (N, E), (N), (N, k)
  int32_t *moe_choice, *moe_slot;                // (N, k) each
  int32_t *moe_offsets, *moe_rows, *moe_counts;  // (E + 1), (Mmax), (B, E)
  void* moe_y;                                   // (Mmax, C) this TP rank's partial expert outputs
  void* moe_xr;                                  // (Rmax, C) expert parallelism only
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
  int B, T, C, NH;     // NH: local query heads; T: this rank's tokens per sequence (seq_len / cp)
  int tp;              // tensor-parallel size; C is full, Cl = C/tp
  int NKV = 0;         // local kv heads; 0 -> NH
  int F = 0;           // MLP hidden size (all ranks); 0 -> 4C
  bool gated = false;  // llama: RMSNorm, RoPE, SwiGLU, no biases
  float eps = 1e-5f;   // RMSNorm epsilon (llama)
  float theta = 1e4f;  // RoPE base (llama)
  bool sp = false;     // sequence parallel: norms and residuals on Ns() = N/tp rows of this rank
  int cp = 1;          // context parallel: ranks sharing each sequence (ring attention when > 1)
  int E = 0, k = 0;    // Mixture of Experts: experts and choices per token (E = 0: dense MLP)
  int cap = 0;         // assignments per expert and sequence; 0: dropless
  double aux_coef = 0, z_coef = 0;  // load-balancing and z-loss weights
  int ep = 1;                       // expert parallel: ranks splitting the E experts
  int N() const { return B * T; }
  int Ns() const { return sp ? N() / tp : N(); }  // rows of the norm/residual regions
  int Cl() const { return C / tp; }  // local attention width NH*D
  int D() const { return C / tp / NH; }
  int KV() const { return NKV > 0 ? NKV : NH; }
  int QKVl() const { return (NH + 2 * KV()) * D(); }   // local q|k|v width
  int Hl() const { return (F > 0 ? F : 4 * C) / tp; }  // local MLP width (SwiGLU's output)
  int FCl() const { return gated ? 2 * Hl() : Hl(); }  // local width of the first MLP GEMM
  // Rows of the experts' buffers: every assignment (dropless) or at most cap per expert.
  int Mmax() const { return cap > 0 ? std::min(N() * k, B * E * cap) : N() * k; }
  int El() const { return E / ep; }  // experts on this rank
  // Rows this rank's experts may receive: from each of the ep ranks, each token's choices among
  // them (top-k picks distinct experts), at most cap per expert and sequence.
  int Rmax() const {
    if (ep == 1) return Mmax();
    const int per =
        cap > 0 ? std::min(N() * std::min(k, El()), B * El() * cap) : N() * std::min(k, El());
    return ep * per;
  }
  // Bytes of one BlockActs in format f; without the attention state when !with_att.
  size_t acts_bytes(const ActFormat& f, bool with_att) const;
};

// The act format of a device for dims d.
ActFormat act_format(const DeviceTraits& dev, const BlockDims& d);
// Whether attention keeps its (T, T) probabilities for backward (cpu without context
// parallelism), so that train.recompute: selective drops and recomputes them; otherwise it keeps
// one log-sum-exp per row (cuda; the ring attention of context parallelism on both backends).
bool attention_keeps_probabilities(const DeviceTraits& dev, const BlockDims& d);

// Scratch shared by all layers and micro-batches (backward of one micro-batch at a time).
// With sequence parallelism proj also holds the all-gathered norm output (forward, backward) and
// dln's reduce-scatter goes to `shard`.
struct BlockScratch {
  void* proj;   // (N, C) partial projection before the all-reduce (reduce-scatter)
  void* dres2;  // (Ns, C)
  void* dln;    // (N, C)
  void* dfchg;  // (N, Hl)
  void* dfch;   // (N, FCl)
  void* datty;  // (N, Cl)
  void* dqkv;   // (N, QKVl)
  float* datt;  // attention backward scratch (cpu: (B, NHl, T, T))
  void* shard;  // (Ns, C) sequence parallel only: a reduce-scattered row shard (else null)
  float* normg;  // (4, C) sequence parallel only: this rank's partial norm weight gradients
  float *rope_cos, *rope_sin;  // (T, D/2) each, llama only: RoPE tables, filled once
  // Mixture of Experts only (else null): the permuted input rows (Mmax, C) and the backward's
  // buffers: dy (Mmax, C), dh (Rmax, FCl), dhg (Rmax, Hl), dxp (Mmax, C), router logits and
  // their gradient (N, E), dgate (N, k); with expert parallelism moe_yr (Rmax, C): the expert
  // side's outputs (forward), then received dy and its input gradient (backward). moe_loss: the
  // step's two loss sums (GPTStage's, backend memory; null: do not add), moe_dloss: the per-token
  // loss weight of the step's backward.
  void *moe_x, *moe_dy, *moe_dh, *moe_dhg, *moe_dxp, *moe_yr;
  float *moe_logits, *moe_dgate;
  double* moe_loss = nullptr;
  double moe_seq_weight = 0, moe_tok_weight = 0;  // of the loss values (1/G, 1/(G*seq_len))
  float moe_dloss = 0;
  // Context parallel only (else null): the ring attention's travelling K|V blocks and their
  // gradients (double-buffered), the forward accumulator (the backward's dq), the running max and
  // sum (the backward's delta), and the positions of every cp rank's T rows.
  void* ring_kv[2];        // (N, 2*KV*D) each: [k | v]
  float* ring_dkv[2];      // (N, 2*KV*D) each: [dk | dv]
  float* ring_acc;         // (N, QKVl): (N, NH*D) forward; dq at q's columns backward
  float *ring_m, *ring_l;  // (B, NH, T) each
  int32_t* ring_pos;       // (cp, T) global positions of each cp rank's rows, filled once
  static size_t bytes(const BlockDims& d, const ActFormat& f);
};

// Carves a BlockActs out of `base` (acts_bytes(f, true) bytes); with `shared_att`, the attention
// state lives there instead (acts_bytes(f, false) bytes from base).
BlockActs block_acts_at(void* base, const BlockDims& d, const ActFormat& f,
                        float* shared_att = nullptr);
BlockScratch block_scratch_at(void* base, const BlockDims& d, const ActFormat& f);

}  // namespace loom
