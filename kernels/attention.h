// Causal multi-head self-attention over a fused qkv activation, forward and backward.
#pragma once

namespace loom::cpu {

// qkv (B, T, 3*C) holds [q | k | v], each C = NH * HS columns, head h at columns [h*HS, (h+1)*HS).
// out (B, T, C): out[b,t,h] = sum_{s<=t} softmax_s(q.k / sqrt(HS)) v, heads concatenated.
// att (B, NH, T, T): the softmax probabilities (row t, columns s<=t; s>t written as 0), kept for
// backward. Overwrites out and att.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);

// dqkv (B, T, 3*C) = gradient w.r.t. qkv (overwritten). scratch: at least B*NH*T*T floats.
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH);

}  // namespace loom::cpu
