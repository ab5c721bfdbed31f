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
