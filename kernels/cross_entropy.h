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
