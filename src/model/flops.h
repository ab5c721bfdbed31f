// Parameter count and training FLOPs per token of a model (MFU, the plan, the banner).
#pragma once
#include <cstdint>

#include "config/config.h"

namespace loom {

// Canonical parameter count (unpadded vocab, tied embeddings counted once). C = d_model,
// NH = n_head, NKV = kv_heads(), D = head_dim(), F = ffn(), V = vocab_size, L = n_layer:
//   gpt2:  V*C + positions*C + L*(4C + C*3C + 3C + C*C + C + C*F + F + F*C + C) + 2C
//   llama: V*C + L*(2C + C*(NH + 2*NKV)*D + NH*D*C + 3*C*F) + C   (no biases, no wpe)
// plus V*C for an untied lm_head. Mixture of Experts: each layer holds E experts of the MLP's
// size and a router (C*E) in place of the MLP.
int64_t count_params(const ModelConfig& m);
// The parameters one token's forward reads: with Mixture of Experts top_k experts per layer
// (and the router), not E; count_params otherwise.
int64_t count_active_params(const ModelConfig& m);

// Training FLOPs per token (forward + backward, recomputation not counted):
//   6 * N + 12 * L * NH * D * T
// N: the active parameters (count_active_params) a token's matmuls read, at 2 FLOPs per weight
// forward and 4 backward: every parameter except the position table (wpe) and, when untied, the
// input embedding table (its forward is a row lookup; the classifier is counted once, tied or not),
// the biases and norm gains included at the same rate. 12 * L * NH * D * T: attention scores Q K^T
// and weighted values P V, 2 * T * NH * D each forward per token, x3 with backward; the causal half
// is not subtracted. With grouped-query attention the score and value products run per query head,
// so the term has NH * D, not NKV * D; the kv heads only shrink the qkv weights inside N.
double flops_per_token(const ModelConfig& m);

}  // namespace loom
