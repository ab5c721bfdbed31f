// Mixture-of-Experts statistics of a step (docs/moe.md): the loss terms and the expert load of
// every layer, gathered from every rank's stage, for the log, metrics.jsonl and tests.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "layout/run_layout.h"
#include "model/gpt_stage.h"
#include "parallel/parallel_ctx.h"

namespace loom {

struct MoeStats {
  double aux_loss = 0, z_loss = 0;  // the step's values, summed over layers
  // Per layer (all of the model's): assignments each expert got before dropping, summed over
  // the step's micro-batches and data-parallel ranks; assignments dropped.
  std::vector<std::vector<int64_t>> tokens_per_expert;
  std::vector<int64_t> dropped;
  // Per layer held by this rank (others empty): the routing of its last micro-batch, token-major
  // (N*k): the chosen experts in decreasing probability, and 1 kept / 0 dropped.
  std::vector<std::vector<int32_t>> choices, kept;
};

// Collective over pc.world: every rank's stage contributes its layers (TP rank 0 of each).
MoeStats gather_moe_stats(const GPTStage& stage, const RunLayout& run, ParallelCtx& pc);

// {"aux_loss", "z_loss", "tokens_per_expert": [[...] per layer], "dropped": [...]}.
nlohmann::ordered_json moe_stats_json(const MoeStats& s);

}  // namespace loom
