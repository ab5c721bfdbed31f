// Rotary position embedding (Llama's rotate-half pairing) on the q and k heads of a fused qkv.
#pragma once

namespace loom::cpu {

// Layout: qkv (B, T, (NH + 2*NKV) * D) = [q heads (NH*D) | k heads (NKV*D) | v heads (NKV*D)],
// head h at columns [h*D, (h+1)*D) of its block (NKV == NH: the (B, T, 3C) layout of multi-head
// attention). The op works IN PLACE on the first (NH + NKV) * D columns of each row (every q and
// k head); v is not touched. Position of row t is t. D even.
// Pairing as Hugging Face's Llama (rotate_half): dimension i < D/2 pairs with i + D/2, angle
// t * theta^(-2i/D): x'_i = x_i cos - x_{i+D/2} sin, x'_{i+D/2} = x_{i+D/2} cos + x_i sin, so
// Hugging Face q/k projection weights load without permutation.

// cos, sin (T, D/2): the tables, cos/sin(t * theta^(-2i/D)) with the angle and its cos/sin in
// double, then rounded to fp32 once. Computed once per (T, D, theta); a table built for T rows
// serves every sequence length <= T (rows are positions).
void rope_table(float* cos, float* sin, int T, int D, float theta);

// Rotates q and k of qkv in place (forward).
void rope_forward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int D);

// The gradient through the rotation: rotates dq and dk of dqkv (same layout) in place by the
// inverse rotation (angle -t * theta^(-2i/D)); dv is not touched.
void rope_backward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int D);

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda_device.h"

namespace loom::cuda {

// cuda twins on device pointers, enqueued on `stream`. The tables are fp32 on the device, filled
// by the device's double-precision cos/sin (same values as the cpu twin's to within one fp32
// rounding); qkv in fp32, bf16 or fp16 with fp32 math, each rotated value rounded once.
void rope_table(float* cos, float* sin, int T, int D, float theta, void* stream);

void rope_forward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int D, void* stream);
void rope_forward(bf16* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int D, void* stream);
void rope_forward(f16* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int D, void* stream);
void rope_backward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int D, void* stream);
void rope_backward(bf16* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int D, void* stream);
void rope_backward(f16* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int D, void* stream);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
