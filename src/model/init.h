// GPT-2 initialization, independent of the layout: element (r, c) of a canonical tensor gets
// the same value whatever rank holds it.
#pragma once
#include <cstdint>

#include "layout/param_layout.h"

namespace loom {

// Fills the rank's flat parameter buffer: N(0, 0.02) matrices and embeddings, residual
// projections N(0, 0.02/sqrt(2*n_layer)), zero biases, unit layernorm gains, zero padding rows.
void init_params(const ParamLayout& layout, const ModelConfig& m, uint64_t seed, float* params);

}  // namespace loom
