// Context-parallel (ring) attention, cpu twin: the local query rows against one block of keys and
// values at a time (the local block, or one received from another rank), masked causally by
// global positions, with an online softmax that carries a running max and sum between blocks.
#pragma once
#include <cstddef>

namespace loom::cpu {

// Shapes of one step. Query rows (B, Tq) hold NH heads of size D at columns h*D of rows with
// stride ldq; the key and value rows (B, Tk) hold NKV heads each at columns kvh*D of k and v with
// row stride ldkv (NKV divides NH; query head h reads kv head h / (NH / NKV)). qpos (Tq) and kpos
// (Tk) are the global positions of the rows (the same for every b); query t sees key s iff
// kpos[s] <= qpos[t].
struct RingDims {
  int B, Tq, Tk, NH, NKV, D;
  int ldq, ldkv;
};

// Floats of `work` a step needs: one (Tq, Tk) score tile per thread-owned head.
size_t ring_attention_work_floats(const RingDims& d);

// Before the first block: acc (B, Tq, NH*D) = 0, m (B, NH, Tq) = -inf, l (B, NH, Tq) = 0.
void ring_attention_begin(float* acc, float* m, float* l, const RingDims& d);

// One block: S = q.k / sqrt(D) masked; m' = max(m, max_s S); acc = acc exp(m - m') + P v and
// l = l exp(m - m') + sum_s P with P = exp(S - m'). Rows whose keys are all masked so far keep
// m = -inf and acc = l = 0.
void ring_attention_forward_step(float* acc, float* m, float* l, const float* q, const float* k,
                                 const float* v, const int* qpos, const int* kpos,
                                 const RingDims& d, float* work);

// After the last block: out (B, Tq, NH*D) = acc / l and lse (B, NH, Tq) = m + log l (the
// log-sum-exp of each row over every key it sees; every row sees at least its own key).
void ring_attention_finish(float* out, float* lse, const float* acc, const float* m, const float* l,
                           const RingDims& d);

// delta (B, NH, Tq) = rowsum(dout * out) per head: the softmax backward's correction, once per
// backward before the blocks.
void ring_attention_delta(float* delta, const float* dout, const float* out, const RingDims& d);

// One block of the backward, from the forward's lse: P = exp(S - lse) masked, dS = P (dout v^T -
// delta); dq (rows of stride ldq) += dS k / sqrt(D); dk, dv (rows of stride ldkv) += dS^T q /
// sqrt(D) and P^T dout, summed over the query heads of each kv head in increasing order.
void ring_attention_backward_step(float* dq, float* dk, float* dv, const float* dout,
                                  const float* q, const float* k, const float* v, const float* lse,
                                  const float* delta, const int* qpos, const int* kpos,
                                  const RingDims& d, float* work);

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda_device.h"

namespace loom::cuda {

using cpu::RingDims;

// cuda twins on device pointers (qpos, kpos too), enqueued on `stream`: one warp per query row
// (forward, dq) or key row (dk, dv), keys taken one at a time with the online softmax in fp32;
// q, k, v, dout and out in fp32, bf16 or fp16, the softmax state, acc, lse, delta and the
// gradients dq, dk, dv in fp32 (they accumulate over blocks). dk and dv of a kv head sum its
// query heads in increasing order, then the query rows in order: no atomics, deterministic.
// Head size D <= 128.
void ring_attention_begin(float* acc, float* m, float* l, const RingDims& d, void* stream);
template <typename T>
void ring_attention_forward_step(float* acc, float* m, float* l, const T* q, const T* k,
                                 const T* v, const int* qpos, const int* kpos, const RingDims& d,
                                 void* stream);
template <typename T>
void ring_attention_finish(T* out, float* lse, const float* acc, const float* m, const float* l,
                           const RingDims& d, void* stream);
template <typename T>
void ring_attention_delta(float* delta, const T* dout, const T* out, const RingDims& d,
                          void* stream);
template <typename T>
void ring_attention_backward_step(float* dq, float* dk, float* dv, const T* dout, const T* q,
                                  const T* k, const T* v, const float* lse, const float* delta,
                                  const int* qpos, const int* kpos, const RingDims& d,
                                  void* stream);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
