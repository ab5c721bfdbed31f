// Gathers the MoE loss terms and expert load over the ranks (each layer from TP rank 0 of the
// stage that holds it, summed over data parallelism).
#include "train/moe_stats.h"

namespace loom {

MoeStats gather_moe_stats(const GPTStage& stage, const RunLayout& run, ParallelCtx& pc) {
  const ModelConfig& m = run.model();
  const size_t L = size_t(m.n_layer), E = size_t(m.moe.num_experts);
  // [aux, z, counts (L, E), dropped (L)], this rank's share, then summed over the world.
  std::vector<double> v(2 + L * E + L, 0.0);
  const std::vector<int> layers = run.params().layer_list();
  if (pc.coord.tp == 0) {
    const std::array<double, 2> losses = stage.moe_loss_sums();
    v[0] = losses[0], v[1] = losses[1];
    for (size_t w = 0; w < layers.size(); ++w) {
      const size_t l = size_t(layers[w]);
      for (size_t e = 0; e < E; ++e) v[2 + l * E + e] = double(stage.moe_counts()[w * E + e]);
      v[2 + L * E + l] = double(stage.moe_dropped()[w]);
    }
  }
  pc.world.all_reduce(v.data(), v.size(), ReduceOp::Sum);
  MoeStats s;
  s.aux_loss = v[0], s.z_loss = v[1];
  s.tokens_per_expert.assign(L, std::vector<int64_t>(E));
  s.dropped.assign(L, 0);
  s.choices.assign(L, {});
  s.kept.assign(L, {});
  for (size_t l = 0; l < L; ++l) {
    for (size_t e = 0; e < E; ++e) s.tokens_per_expert[l][e] = int64_t(v[2 + l * E + e]);
    s.dropped[l] = int64_t(v[2 + L * E + l]);
  }
  for (size_t w = 0; w < layers.size(); ++w) {
    s.choices[size_t(layers[w])] = stage.moe_choices()[w];
    s.kept[size_t(layers[w])] = stage.moe_kept()[w];
  }
  return s;
}

nlohmann::ordered_json moe_stats_json(const MoeStats& s) {
  nlohmann::ordered_json j;
  j["aux_loss"] = s.aux_loss;
  j["z_loss"] = s.z_loss;
  j["tokens_per_expert"] = s.tokens_per_expert;
  j["dropped"] = s.dropped;
  return j;
}

}  // namespace loom
