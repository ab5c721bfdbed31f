// Token + position embedding, vocab-parallel ready: a rank holds rows [vocab_start, vocab_start+Vl).
#pragma once
#include <cstdint>

namespace loom::cpu {

// out (N=B*T, C) = (tok in shard ? wte[tok - vocab_start] : 0) + (wpe ? wpe[t] : 0), t = n % T.
// wte (Vl, C) local rows; wpe (>=T, C) or nullptr. Overwrites out.
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int B, int T, int C, int vocab_start, int vocab_local);

// dwte (Vl, C) += rows of dout for tokens in the shard; dwpe (>=T, C) += sum over b of dout[b,t]
// (skipped when dwpe is nullptr). Deterministic: the same result for any thread count.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int vocab_start, int vocab_local);

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include <cstddef>

#include "kernels/cuda_device.h"

namespace loom::cuda {

// cuda twins on device pointers, enqueued on `stream` (a cudaStream_t). Tables and activations
// in fp32, bf16 or fp16; the gradients dwte, dwpe always fp32 (accumulated, as the cpu twin).
// The backward is deterministic without atomics and sums each wte row's rows in increasing order,
// the cpu twin's order: it sorts (token, row) keys in `scratch` (a bitonic sort, O(N log^2 N)),
// then the first block of each run of equal tokens adds the run's rows to that wte row.
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, int vocab_start, int vocab_local, void* stream);
void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B,
                       int T, int C, int vocab_start, int vocab_local, void* stream);
void embedding_forward(f16* out, const int32_t* tokens, const f16* wte, const f16* wpe, int B,
                       int T, int C, int vocab_start, int vocab_local, void* stream);
// Bytes of scratch embedding_backward needs for N = B*T rows: 8 per row, N rounded up to a
// power of two (the 32 MiB GemmHandle workspace holds 4M rows).
size_t embedding_backward_scratch_bytes(int N);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int vocab_start, int vocab_local, void* stream,
                        Workspace scratch);
void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B,
                        int T, int C, int vocab_start, int vocab_local, void* stream,
                        Workspace scratch);
void embedding_backward(float* dwte, float* dwpe, const f16* dout, const int32_t* tokens, int B,
                        int T, int C, int vocab_start, int vocab_local, void* stream,
                        Workspace scratch);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
