// Tensor-core causal attention (kernels/attention_tc.cu), called by kernels/attention.cu for
// bf16/fp16 storage and head size 64 or 128.
#pragma once
#include "kernels/cuda_common.cuh"

namespace loom::cuda::tc {

// Where one (b, head) lives. Query head h reads key/value head h / (NH / NKV): NKV == NH is
// multi-head attention, NKV < NH grouped-query attention (NKV dividing NH).
struct AttnLayout {
  int B, T, NH, NKV, D;
  long long qkv_row;  // elements between rows t and t + 1 of qkv and dqkv
  int k_col, v_col;   // first column of the k block and of the v block in a qkv row (q: 0)
  int o_row;          // elements between rows of out and dout: NH * D
};

// The layout of a fused qkv (B, T, NH*D + 2*NKV*D): [q heads | k heads | v heads].
inline AttnLayout attn_layout(int B, int T, int NH, int NKV, int D) {
  const int C = NH * D, Ckv = NKV * D;
  return AttnLayout{B, T, NH, NKV, D, (long long)C + 2LL * Ckv, C, C + Ckv, C};
}

// True when the tensor-core kernels take (B, T, ...) with these buffers: head size 64 or 128 and
// every pointer 16-byte aligned (128-bit staging loads and stores).
bool takes(int D, const void* a, const void* b, const void* c, const void* d);

// out (B, T, NH*D), lse (B, NH, T) from qkv; T is __nv_bfloat16 or __half.
template <typename T>
void forward(T* out, float* lse, const T* qkv, const AttnLayout& g, cudaStream_t s);

// dqkv from dout, qkv, lse and delta (B, NH, T) = rowsum(dout * out), already computed.
template <typename T>
void backward(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta,
              const AttnLayout& g, cudaStream_t s);

}  // namespace loom::cuda::tc
