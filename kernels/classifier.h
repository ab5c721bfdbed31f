// Fused classifier (logits = x W^T over a vocab shard) and softmax cross-entropy, in vocab chunks
// so each (N, chunk) block of logits is reduced or differentiated while it is still in cache.
// Same contract as cross_entropy.h (vocab-parallel, padded shard of global ids [vstart, vstart+Vl),
// ids >= V never contribute); the caller all-reduces the row statistics between the two passes:
//   classifier_forward -> (tp > 1: keep local max; all-reduce MAX; ce_rescale_sums; all-reduce SUM)
//   -> ce_loss -> classifier_backward.
// Threads own whole chunks (single-threaded BLAS inside) and per-chunk statistics are merged in
// chunk order, so logits, statistics, dlogits and dW do not depend on the thread count; dx is one
// threaded GEMM, whose summation order is OpenBLAS's and may change with the thread count.
#pragma once
#include <cstddef>
#include <cstdint>

namespace loom::cpu {

// Vocab columns per chunk for N rows: an (N, chunk) block of about 1 MiB (256..2048 columns).
// The functions below use it when their `chunk` argument is 0 (tests pass small chunks).
int classifier_chunk(int N, int Vl);
// Floats of the `work` buffer classifier_forward needs for its statistics (chunk as passed).
size_t classifier_work_floats(int N, int Vl, int chunk = 0);

// logits (N, Vl) = x (N, C) @ W^T, W (Vl, C) (overwritten; kept for eval and the backward).
// With maxv, sums and work (all or none): maxv (N) = max over the shard's valid ids (-inf when it
// has none); sums (N, 2): [0] = sum over valid ids exp(logit - maxv) (relative to this shard's
// max), [1] = the target logit when the target is in the shard, else 0 (targets may be nullptr
// only without statistics); work: classifier_work_floats() floats of scratch.
void classifier_forward(float* logits, float* maxv, float* sums, float* work, const float* x,
                        const float* W, const int32_t* targets, int N, int C, int Vl, int vstart,
                        int V, int chunk = 0);

// After the MAX all-reduce: sums[2n] *= exp(local_max[n] - global_max[n]) (0 for an empty shard),
// so the SUM all-reduce adds sums of exp(logit - global max).
void ce_rescale_sums(float* sums, const float* local_max, const float* global_max, int N);

// With the reduced statistics: logits (N, Vl) become dlogits = (softmax - onehot) * dloss in
// place (0 at padding), dW (Vl, C) += dlogits^T @ x chunk by chunk, then dx (N, C) = dlogits @ W
// (overwritten) in one GEMM.
void classifier_backward(float* dx, float* dW, float* logits, const float* maxv, const float* sums,
                         const int32_t* targets, float dloss, const float* x, const float* W, int N,
                         int C, int Vl, int vstart, int V, int chunk = 0);

}  // namespace loom::cpu
