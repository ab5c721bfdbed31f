// Model configurations shared by the tests.
#pragma once
#include "config/config.h"

namespace loom::test {

// A GPT-2 shape: layers, heads, width, vocabulary and sequence length; the rest as ModelConfig's
// defaults.
inline ModelConfig gpt_model(int n_layer, int n_head, int d_model, int vocab_size, int seq_len) {
  ModelConfig m;
  m.n_layer = n_layer, m.n_head = n_head, m.d_model = d_model;
  m.vocab_size = vocab_size, m.seq_len = seq_len;
  return m;
}

// The GPT-2 of the reference fixtures (tests/reference/make_gpt2_fixtures.py, the gpt2_tiny_*
// files): 2 layers, 4 heads, d_model 32, vocab 97, 16 positions, samples of 8 tokens, tied
// embeddings.
inline ModelConfig fixture_model() {
  ModelConfig m = gpt_model(2, 4, 32, 97, 8);
  m.max_positions = 16, m.tie_embeddings = true;
  return m;
}

// A small Llama for the plan tests: 4 layers, 4 query heads of 8 sharing 2 kv heads, SwiGLU
// width 96, vocabulary 97, T 8.
inline ModelConfig tiny_llama(bool tied = true) {
  ModelConfig m = gpt_model(4, 4, 32, 97, 8);
  m.arch = "llama";
  m.n_kv_head = 2, m.ffn_hidden = 96, m.tie_embeddings = tied;
  return m;
}

}  // namespace loom::test
