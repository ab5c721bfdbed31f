// Plan inputs: candidate layout, model and batch, bytes per element, per-stage shapes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/device_traits.h"
#include "config/config.h"
#include "layout/rank_memory.h"
#include "layout/schedule.h"
#include "layout/stage_memory.h"

namespace loom::plan {

using ::loom::Recompute;  // none | selective | full (layout/stage_memory.h)
using ::loom::recompute_name;

// One point of the search: the 4D grid, the virtual stages, the micro-batch size, the ZeRO stage,
// recomputation, sequence parallelism.
struct Candidate {
  int dp = 1, pp = 1, tp = 1;
  int cp = 1;  // parallel.cp: ranks sharing each sequence (ring attention when > 1)
  int v = 1;   // parallel.virtual_stages: model chunks per pipeline stage (pp > 1 only)
  int micro_batch = 1;
  int zero = 0;
  Recompute recompute = Recompute::None;
  bool sp = false;  // parallel.sequence_parallel (tp > 1 only)
  int ep = 1;       // parallel.ep: data-parallel ranks splitting a Mixture of Experts' experts
  int world() const { return dp * pp * tp * cp; }
  int replicas() const { return dp * cp; }  // ranks summing gradients, sharing ZeRO's shards
};

// Bytes per element of what crosses the network: parameters (the ZeRO all-gathers), gradients
// (the reductions) and activations (pipeline and tensor-parallel transfers). fp32: all 4 bytes.
// bf16/fp16 (cuda): 2-byte activations and compute weights, fp32 gradients and master weights.
// Memory is counted apart, by layout/rank_memory.h.
struct Precision {
  std::string name = "fp32";
  DType dtype = DType::F32;
  int param = 4, grad = 4, act = 4;
};
Precision precision_of(const std::string& dtype);

// What the plan takes from a config: the model, the global batch, schedule and rank order.
struct PlanModel {
  ModelConfig model;
  int global_batch = 1;  // sequences per optimizer step (train.global_batch_size)
  ScheduleKind schedule = ScheduleKind::OneFOneB;  // parallel.schedule
  std::string order = "tp-dp-pp";                  // parallel.order: placement of ranks on nodes
  std::string device = "cpu";  // the backend modelled: cpu (exact accounting) or cuda
  Precision prec;
  bool overlap = false;  // parallel.overlap: second staging/working/receive buffers
  // The search bounds: virtual stages up to max_virtual_stages (interleaved 1F1B, pp > 1), and
  // context parallelism where each of the 2*cp chunks of a sequence keeps min_cp_chunk tokens.
  int max_virtual_stages = 4;
  int min_cp_chunk = 256;
  // True when loom's allocations and counters are reproduced exactly (cpu backend, fp32).
  bool exact_backend() const { return device == "cpu" && prec.name == "fp32"; }
  // The modelled device: its element size, alignment and kernel work sizes.
  DeviceTraits traits() const;
};

// The tokens of one micro-batch on one rank: micro_batch x seq_len / cp (N).
inline uint64_t rank_tokens(const PlanModel& pm, const Candidate& c) {
  return uint64_t(c.micro_batch) * uint64_t(pm.model.seq_len / c.cp);
}

// The parameters one (pipeline stage, TP rank) holds (layout/rank_memory.h).
using StageShape = ::loom::StageParams;

// One StageShape per pipeline stage (layers split as loom splits them: even, extra layers to the
// earlier stages). Needs pp <= n_layer and tp dividing n_head and d_model.
// With v > 1 each stage holds v equal chunks (needs n_layer % (pp*v) == 0); with ep > 1 a rank
// holds E/ep of each layer's experts.
std::vector<StageShape> stage_shapes(const ModelConfig& m, int tp, int pp, int v = 1, int ep = 1);

}  // namespace loom::plan
