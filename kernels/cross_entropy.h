// Softmax cross-entropy over a (possibly vocab-parallel, padded) logits shard, in three passes
// so the per-row statistics can be all-reduced across tensor-parallel ranks in between:
//   1. ce_row_max      -> all-reduce MAX
//   2. ce_row_sums     -> all-reduce SUM (sumexp and target logit)
//   3. ce_loss / ce_backward
// The shard holds global vocab ids [vstart, vstart+Vl); ids >= V (padding) never contribute.
#pragma once
#include <cstdint>

namespace loom::cpu {

// maxv (N) = max over the valid ids of the shard (-inf when the shard has none).
void ce_row_max(float* maxv, const float* logits, int N, int Vl, int vstart, int V);

// sums (N, 2): [0] = sum over valid ids exp(logit - maxv), [1] = logit of the target when the
// target falls in the shard, else 0. Overwrites sums.
void ce_row_sums(float* sums, const float* logits, const float* maxv, const int32_t* targets, int N,
                 int Vl, int vstart, int V);

// losses (N) = log(sumexp) + maxv - target_logit, from the reduced statistics.
void ce_loss(float* losses, const float* maxv, const float* sums, int N);

// In place: logits (N, Vl) become dlogits = (softmax - onehot(target)) * dloss, 0 at padding.
void ce_backward_inplace(float* logits, const float* maxv, const float* sums,
                         const int32_t* targets, float dloss, int N, int Vl, int vstart, int V);

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda_device.h"

namespace loom::cuda {

// cuda twins on device pointers (logits fp32, bf16 or fp16; statistics, losses fp32), enqueued
// on `stream` (a cudaStream_t); same contracts and pass structure as above. One block per row.
// Max, exp, sums and losses are fp32 math whatever the storage. fp16 logits hold magnitudes up
// to 65504; the in-place fp16 dlogits are bounded by |dloss| (the loss-scaled 1/N), so they
// overflow to inf only when dloss itself exceeds 65504, and tiny probabilities underflow to
// subnormals or zero, which is what loss scaling is for.
void ce_row_max(float* maxv, const float* logits, int N, int Vl, int vstart, int V, void* stream);
void ce_row_max(float* maxv, const bf16* logits, int N, int Vl, int vstart, int V, void* stream);
void ce_row_max(float* maxv, const f16* logits, int N, int Vl, int vstart, int V, void* stream);
void ce_row_sums(float* sums, const float* logits, const float* maxv, const int32_t* targets, int N,
                 int Vl, int vstart, int V, void* stream);
void ce_row_sums(float* sums, const bf16* logits, const float* maxv, const int32_t* targets, int N,
                 int Vl, int vstart, int V, void* stream);
void ce_row_sums(float* sums, const f16* logits, const float* maxv, const int32_t* targets, int N,
                 int Vl, int vstart, int V, void* stream);

// Passes 1 and 2 in one online pass (one read of the logits): maxv (N) = the shard's max, sums
// (N, 2) relative to it, as classifier_forward's statistics. With tp > 1 keep maxv as the local
// max, all-reduce MAX into a global max, ce_rescale_sums, then all-reduce SUM.
void ce_row_stats(float* maxv, float* sums, const float* logits, const int32_t* targets, int N,
                  int Vl, int vstart, int V, void* stream);
void ce_row_stats(float* maxv, float* sums, const bf16* logits, const int32_t* targets, int N,
                  int Vl, int vstart, int V, void* stream);
void ce_row_stats(float* maxv, float* sums, const f16* logits, const int32_t* targets, int N,
                  int Vl, int vstart, int V, void* stream);

// sums[2n] *= exp(local_max[n] - global_max[n]) (0 for an empty shard), as cpu::ce_rescale_sums.
void ce_rescale_sums(float* sums, const float* local_max, const float* global_max, int N,
                     void* stream);
void ce_loss(float* losses, const float* maxv, const float* sums, int N, void* stream);
void ce_backward_inplace(float* logits, const float* maxv, const float* sums,
                         const int32_t* targets, float dloss, int N, int Vl, int vstart, int V,
                         void* stream);
void ce_backward_inplace(bf16* logits, const float* maxv, const float* sums,
                         const int32_t* targets, float dloss, int N, int Vl, int vstart, int V,
                         void* stream);
void ce_backward_inplace(f16* logits, const float* maxv, const float* sums, const int32_t* targets,
                         float dloss, int N, int Vl, int vstart, int V, void* stream);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
