// Next-token sampling: greedy, temperature, top-k and top-p (nucleus), a pure function of
// (logits, seed, sequence, position), so every rank that holds the same logits draws the same id.
#pragma once
#include <cstdint>
#include <string>

namespace loom {

struct SampleOptions {
  float temperature = 1.0f;  // 0: greedy (argmax, ties to the lowest id)
  int top_k = 0;             // 0: the whole vocabulary
  float top_p = 1.0f;        // keep the smallest set of most likely ids whose mass reaches top_p
  uint64_t seed = 1;
};

// "" when opt is valid, else what is wrong with which value (temperature >= 0 and finite,
// top_k >= 0, 0 < top_p <= 1), for the caller's error message.
std::string sample_options_problem(const SampleOptions& opt);

// Picks the next id among the first V logits (the ids the tokenizer can decode; the caller
// leaves out the vocabulary's padding rows): softmax(logits / temperature) restricted to the
// top_k largest, then to the top_p nucleus, drawn with the counter-based generator at
// (seed, sequence, position). Candidates are ordered by value, then id, so the draw does not
// depend on the sort.
int32_t sample_token(const float* logits, int V, const SampleOptions& opt, uint64_t sequence,
                     uint64_t position);

// log softmax(logits[0..V))[id], in double: the model's log-probability of id at temperature 1.
float token_logprob(const float* logits, int V, int32_t id);

}  // namespace loom
