// Causal multi-head self-attention over a fused qkv activation, forward and backward.
#pragma once
#include <cstddef>

namespace loom::cpu {

// qkv (B, T, 3*C) holds [q | k | v], each C = NH * HS columns, head h at columns [h*HS, (h+1)*HS).
// out (B, T, C): out[b,t,h] = sum_{s<=t} softmax_s(q.k / sqrt(HS)) v, heads concatenated.
// att (B, NH, T, T): the softmax probabilities (row t, columns s<=t; s>t written as 0), kept for
// backward. Overwrites out and att.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);

// dqkv (B, T, 3*C) = gradient w.r.t. qkv (overwritten). scratch: at least B*NH*T*T floats.
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH);

// B*NH*T*T floats (dS) when NKV == NH; with groups also 2*T*D per (b, kv head) for the per-head
// dK, dV before they are added in head order.
size_t attention_backward_scratch_floats(int B, int T, int NH, int NKV, int D);

// Grouped-query attention: qkv (B, T, (NH + 2*NKV) * D) = [q heads (NH*D) | k heads (NKV*D) |
// v heads (NKV*D)], NKV dividing NH; query head h reads kv head h / (NH / NKV). NKV == NH is the
// multi-head layout above (C = NH*D), NKV == 1 multi-query attention. out (B, T, NH*D), att
// (B, NH, T, T) as above. The functions above are these with NKV = NH, D = C / NH.
void attention_forward_gqa(float* out, float* att, const float* qkv, int B, int T, int NH, int NKV,
                           int D);

// dqkv (B, T, (NH + 2*NKV) * D) overwritten; dK and dV of a kv head are the sums over the query
// heads of its group, added head by head in increasing order (each head's own sum over query
// tiles first): the bits of multi-head attention on repeated kv heads summed in that order.
// scratch: at least attention_backward_scratch_floats(B, T, NH, NKV, D) floats.
void attention_backward_gqa(float* dqkv, float* scratch, const float* dout, const float* qkv,
                            const float* att, int B, int T, int NH, int NKV, int D);

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda_device.h"

namespace loom::cuda {

// cuda twins (flash-attention style; no (T, T) matrix in memory) on device pointers, enqueued on
// `stream` (a cudaStream_t). Head size C/NH must be 16, 32, 64 or 128; B*NH <= 65535.
// out (B, T, C) as the cpu twin; lse (B, NH, T) fp32 = log sum_{s<=t} exp(q.k/sqrt(HS)) per row,
// saved for the backward in place of att. Scores, softmax and lse are fp32; bf16 or fp16 storage
// rounds out once (|out| <= max |v|, so fp16 out overflows only if v did). bf16/fp16 with head
// size 64 or 128 (and 16-byte aligned buffers) run on tensor cores: 16-bit operands, fp32
// accumulation, P and dS rounded to the storage type before their products (an fp16 dS beyond
// 65504 becomes inf, as a stored gradient would, for the loss scaler); otherwise fp32 FMAs.
bool attention_uses_tensor_cores(int head_size, int storage_bytes);

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                       void* stream);
void attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                       void* stream);
void attention_forward(f16* out, float* lse, const f16* qkv, int B, int T, int C, int NH,
                       void* stream);

// dqkv (B, T, 3C) overwritten, recomputing P from q, k and lse; out is the forward's output and
// delta (B, NH, T) floats of scratch (rowsum(dout * out)). Deterministic (no atomics).
// fp16 dqkv: a (loss-scaled) gradient beyond 65504 is stored as inf, for the loss scaler.
void attention_backward(float* dqkv, float* delta, const float* dout, const float* qkv,
                        const float* out, const float* lse, int B, int T, int C, int NH,
                        void* stream);
void attention_backward(bf16* dqkv, float* delta, const bf16* dout, const bf16* qkv,
                        const bf16* out, const float* lse, int B, int T, int C, int NH,
                        void* stream);
void attention_backward(f16* dqkv, float* delta, const f16* dout, const f16* qkv, const f16* out,
                        const float* lse, int B, int T, int C, int NH, void* stream);

// Grouped-query twins on the (B, T, (NH + 2*NKV) * D) layout of the cpu twins (head size D as
// above, NKV dividing NH); the functions above are these with NKV = NH, D = C / NH. lse and delta
// stay (B, NH, T). dK and dV of a kv head sum its group's query heads in a fixed order.
void attention_forward_gqa(float* out, float* lse, const float* qkv, int B, int T, int NH, int NKV,
                           int D, void* stream);
void attention_forward_gqa(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int NKV,
                           int D, void* stream);
void attention_forward_gqa(f16* out, float* lse, const f16* qkv, int B, int T, int NH, int NKV,
                           int D, void* stream);
void attention_backward_gqa(float* dqkv, float* delta, const float* dout, const float* qkv,
                            const float* out, const float* lse, int B, int T, int NH, int NKV,
                            int D, void* stream);
void attention_backward_gqa(bf16* dqkv, float* delta, const bf16* dout, const bf16* qkv,
                            const bf16* out, const float* lse, int B, int T, int NH, int NKV, int D,
                            void* stream);
void attention_backward_gqa(f16* dqkv, float* delta, const f16* dout, const f16* qkv,
                            const f16* out, const float* lse, int B, int T, int NH, int NKV, int D,
                            void* stream);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
