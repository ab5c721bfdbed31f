// Text generation from a single-rank model: temperature / top-k sampling that is a pure
// function of (logits, seed, position), and an autoregressive loop over GPTStage.
#pragma once
#include <cstdint>
#include <vector>

#include "model/gpt_stage.h"

namespace loom {

struct SampleOptions {
  int max_tokens = 64;
  float temperature = 1.0f;  // 0: greedy (argmax)
  int top_k = 0;             // 0: the whole vocabulary
  uint64_t seed = 1;
  int stop_token = -1;       // stop after producing this id (e.g. EOD); -1: never
};

// Picks the next id from logits (V) (the first V entries; padding excluded by the caller):
// softmax(logits / temperature) restricted to the top_k largest, drawn with the counter-based
// generator at (seed, index). Ties in the greedy case go to the lowest id.
int32_t sample_token(const float* logits, int V, const SampleOptions& opt, uint64_t index);

// Appends up to opt.max_tokens ids to `ids` (which holds the prompt, 1..T ids). The stage must be
// a whole model on one rank (first and last stage, tp 1) built with micro-batch 1. Each new
// token re-runs the forward over the context (no KV cache: fine for the cpu backend's sizes);
// once T ids exist, the context is the last T ids.
void generate(GPTStage& model, int vocab_size, std::vector<int32_t>& ids, const SampleOptions& opt);

}  // namespace loom
