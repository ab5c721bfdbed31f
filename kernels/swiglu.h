// SwiGLU (Llama's MLP gate): out = silu(gate) * up from one fused [gate | up] activation.
#pragma once

namespace loom::cpu {

// Layout: gu (N, 2F), each row [gate (F) | up (F)] (the output of one column-parallel GEMM whose
// weight stacks W_gate over W_up; a tensor-parallel rank holds (N, 2F/tp) = [gate shard | up
// shard] and runs this op on its shards unchanged). out (N, F) = silu(gate) * up, silu(g) =
// g * sigmoid(g). Overwrites out.
void swiglu_forward(float* out, const float* gu, int N, int F);

// dgu (N, 2F) = [dout * up * silu'(gate) | dout * silu(gate)], silu'(g) = s (1 + g (1 - s)),
// s = sigmoid(g). Overwrites dgu.
void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int F);

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda_device.h"

namespace loom::cuda {

// cuda twins on device pointers, enqueued on `stream`; fp32 math, each stored value rounded once
// to the storage type. Same contracts as the cpu twins.
void swiglu_forward(float* out, const float* gu, int N, int F, void* stream);
void swiglu_forward(bf16* out, const bf16* gu, int N, int F, void* stream);
void swiglu_forward(f16* out, const f16* gu, int N, int F, void* stream);
void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int F, void* stream);
void swiglu_backward(bf16* dgu, const bf16* dout, const bf16* gu, int N, int F, void* stream);
void swiglu_backward(f16* dgu, const f16* dout, const f16* gu, int N, int F, void* stream);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
