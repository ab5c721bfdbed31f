// Parameter count and training FLOPs per token of a model (MFU, the plan, the banner).
#pragma once
#include <cstdint>

#include "config/config.h"

namespace loom {

// Canonical parameter count (unpadded vocab, tied embeddings counted once).
int64_t count_params(const ModelConfig& m);
// Training FLOPs per token: 6 * (parameters except position embeddings) + 12 * L * C * T
// (attention scores and weighted values, forward and backward; the causal half not subtracted).
double flops_per_token(const ModelConfig& m);

}  // namespace loom
