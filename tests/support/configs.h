// Model configurations shared by the tests.
#pragma once
#include "config/config.h"

namespace loom::test {

// The GPT-2 of the reference fixtures (tests/reference/make_gpt2_fixtures.py, the gpt2_tiny_*
// files): 2 layers, 4 heads, d_model 32, vocab 97, 16 positions, samples of 8 tokens, tied
// embeddings.
inline ModelConfig fixture_model() {
  ModelConfig m;
  m.n_layer = 2, m.n_head = 4, m.d_model = 32, m.vocab_size = 97, m.seq_len = 8;
  m.max_positions = 16, m.tie_embeddings = true;
  return m;
}

}  // namespace loom::test
