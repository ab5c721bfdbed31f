// Mixture-of-Experts routing, cpu twins (docs/moe.md): the router's softmax and top-k, the
// per-sequence capacity plan that permutes token rows into expert order, the row gather, the
// gated combine and their backwards, and the load-balancing and z losses.
#pragma once
#include <cstddef>
#include <cstdint>

namespace loom::cpu {

// Shapes of one micro-batch: N = B*T token rows, E experts, k choices per token, cap assignments
// per expert and sequence (0: dropless).
struct MoeDims {
  int B, T, E, k, cap;
  int N() const { return B * T; }
};

// probs (N, E) = softmax(logits (N, E)); lse (N) = logsumexp(logits); choice (N, k) the k largest
// probabilities in decreasing order (ties: lower expert); gate (N, k) their probabilities.
void moe_router_forward(float* probs, float* lse, int32_t* choice, float* gate, const float* logits,
                        const MoeDims& d);

// The permutation: assignments (t, j) admitted per sequence in priority order (j major, then t)
// while their expert has fewer than cap (when cap > 0). slot (N, k) = the row of the assignment
// in expert order, or -1 when dropped; offsets (E + 1) the first row of each expert (offsets[E]
// = M kept rows); rows (M) the token row of each permuted row; counts (B, E) the assignments per
// sequence and expert before dropping. Returns M.
int moe_plan(int32_t* slot, int32_t* offsets, int32_t* rows, int32_t* counts, const int32_t* choice,
             const MoeDims& d);

// out (M, C) = x[rows[i]] for i < M (element size `esize` bytes: any dtype).
void moe_gather_rows(void* out, const void* x, const int32_t* rows, int M, int C, size_t esize);

// out (N, C) = sum over kept (t, j) of gate[t, j] * (y[slot[t, j]] + bias[choice[t, j]])
// (bias (E, C) nullable); rows without a kept assignment are 0.
void moe_combine(float* out, const float* y, const float* bias, const int32_t* slot,
                 const int32_t* choice, const float* gate, const MoeDims& d, int C);

// Backward of moe_combine given dout (N, C): dy (M, C) = gate * dout at each kept slot;
// dgate (N, k) = dout . (y[slot] + bias[choice]) (0 when dropped); dbias (E, C) += gate * dout
// (nullable).
void moe_combine_backward(float* dy, float* dgate, float* dbias, const float* dout, const float* y,
                          const float* bias, const int32_t* slot, const int32_t* choice,
                          const float* gate, const MoeDims& d, int C);

// dx (N, C) += dxp[i] at row rows[i], for i < M, in increasing i (deterministic).
void moe_scatter_add_rows(float* dx, const float* dxp, const int32_t* rows, int M, int C);

// The step's loss terms of one micro-batch, added to acc[0] (load balancing) and acc[1]
// (z-loss): acc[0] += aux_coef * E * sum_s sum_e f[s,e] P[s,e] * seq_weight and acc[1] +=
// z_coef * sum_t lse[t]^2 * tok_weight, f from counts / (T*k), P the mean of probs over the
// sequence's tokens.
void moe_losses(double* acc, const float* probs, const float* lse, const int32_t* counts,
                const MoeDims& d, double aux_coef, double z_coef, double seq_weight,
                double tok_weight);

// dlogits (N, E) = the router's gradient: through the softmax from the kept gates' dgate and
// the load-balancing term (aux_coef * E * f[s,e] / T * seq_weight for every token of sequence
// s), plus the z-loss's z_coef * 2 * lse * probs * tok_weight.
void moe_router_backward(float* dlogits, const float* probs, const float* lse,
                         const int32_t* choice, const int32_t* slot, const float* dgate,
                         const int32_t* counts, const MoeDims& d, double aux_coef, double z_coef,
                         double seq_weight, double tok_weight);

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda_device.h"

namespace loom::cuda {

using cpu::MoeDims;

// cuda twins on device pointers, enqueued on `stream`. T (float, bf16, f16) is the activations'
// storage type (x, y, dy, dout, bias, dx), with fp32 arithmetic; the router state (logits, probs,
// lse, gate, dgate, dlogits, dbias) is fp32 and the plan int32, as on the cpu. Every result is
// written in a fixed order (no atomics): the same bits on every run.

// One thread per token: the softmax in double as the cpu twin, top-k by repeated selection
// (ties: the lower expert), so both twins choose alike for the same logits.
void moe_router_forward(float* probs, float* lse, int32_t* choice, float* gate, const float* logits,
                        const MoeDims& d, void* stream);

// The cpu twin's plan, bit for bit: one thread per sequence admits its assignments in priority
// order, one block scans the experts' kept counts into offsets, one thread per sequence writes
// its rows (within an expert: token order, then choice order). work: moe_plan_work_ints(d)
// int32 of scratch. Returns M = offsets[E], read back to the host: synchronizes the stream.
size_t moe_plan_work_ints(const MoeDims& d);
int moe_plan(int32_t* slot, int32_t* offsets, int32_t* rows, int32_t* counts, const int32_t* choice,
             const MoeDims& d, int32_t* work, void* stream);

// out (M, C) = x[rows[i]]; elements of `esize` bytes (1, 2, 4 or 8).
void moe_gather_rows(void* out, const void* x, const int32_t* rows, int M, int C, size_t esize,
                     void* stream);

// One thread per output element: the kept choices summed in choice order, in fp32.
template <typename T>
void moe_combine(T* out, const T* y, const T* bias, const int32_t* slot, const int32_t* choice,
                 const float* gate, const MoeDims& d, int C, void* stream);

// One warp per assignment (dy, dgate: an fp32 dot); dbias (nullable) one thread per (expert,
// column), its assignments added in token order, then choice order.
template <typename T>
void moe_combine_backward(T* dy, float* dgate, float* dbias, const T* dout, const T* y,
                          const T* bias, const int32_t* slot, const int32_t* choice,
                          const float* gate, const MoeDims& d, int C, void* stream);

// dx (N, C) += each token's kept rows of dxp (M, C), in increasing row (the cpu twin's order);
// slot (N, k) is the plan's: one thread per element of dx, fp32 sums.
template <typename T>
void moe_scatter_add_rows(T* dx, const T* dxp, const int32_t* slot, const MoeDims& d, int C,
                          void* stream);

// acc (2, device doubles) += the load-balancing and z-loss terms: one block, double sums.
void moe_losses(double* acc, const float* probs, const float* lse, const int32_t* counts,
                const MoeDims& d, double aux_coef, double z_coef, double seq_weight,
                double tok_weight, void* stream);

// One thread per token, in double as the cpu twin.
void moe_router_backward(float* dlogits, const float* probs, const float* lse,
                         const int32_t* choice, const int32_t* slot, const float* dgate,
                         const int32_t* counts, const MoeDims& d, double aux_coef, double z_coef,
                         double seq_weight, double tok_weight, void* stream);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
