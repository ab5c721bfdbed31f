// Plan inputs: candidate layout, model and batch, bytes per element, per-stage shapes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/device_traits.h"
#include "config/config.h"
#include "layout/stage_memory.h"

namespace loom::plan {

using ::loom::Recompute;  // none | selective | full (layout/stage_memory.h)
using ::loom::recompute_name;

// One point of the search: the 3D grid, the micro-batch size, the ZeRO stage, recomputation.
struct Candidate {
  int dp = 1, pp = 1, tp = 1;
  int micro_batch = 1;
  int zero = 0;
  Recompute recompute = Recompute::None;
  int world() const { return dp * pp * tp; }
};

// Bytes per element. fp32: everything 4 bytes, no separate master copy (loom's cpu backend).
// bf16/fp16 (cuda): 2-byte parameters and activations, fp32 gradients (accumulated over
// micro-batches), fp32 master weights and moments: Megatron's 18 bytes per parameter.
struct Precision {
  std::string name = "fp32";
  int param = 4, grad = 4, act = 4, master = 0, moment = 4;
};
Precision precision_of(const std::string& dtype);

// What the plan takes from a config: the model, the global batch, schedule and rank order.
struct PlanModel {
  ModelConfig model;
  int global_batch = 1;            // sequences per optimizer step (train.global_batch_size)
  std::string schedule = "1f1b";   // 1f1b | gpipe (parallel.schedule)
  std::string order = "tp-dp-pp";  // parallel.order: placement of ranks on nodes
  std::string device = "cpu";      // the backend modelled: cpu (exact accounting) or cuda
  Precision prec;
  bool overlap = false;  // parallel.overlap: second staging/working/receive buffers
  // True when loom's allocations and counters are reproduced exactly (cpu backend, fp32).
  bool exact_backend() const { return device == "cpu" && prec.name == "fp32"; }
  // The modelled device: its element size, alignment and kernel work sizes.
  DeviceTraits traits() const;
};

// The parameters one (pipeline stage, TP rank) holds, counted with ParamLayout (every TP rank of
// a stage holds the same number of elements).
struct StageShape {
  int stage = 0, num_layers = 0;
  bool first = false, last = false;
  uint64_t total = 0;         // ParamLayout::total(): elements of the flat buffer
  uint64_t layer_begin = 0;   // flat offset of the first layer element (layers are contiguous)
  uint64_t layer_elems = 0;   // elements of all transformer layers
  uint64_t widest_layer = 0;  // elements of the largest single layer
  uint64_t other = 0;         // embeddings, final norm, head / tied copy
  uint64_t wte = 0;           // elements of the stage's wte shard (0 when it has none)
  bool tied_across_stages = false;  // wte here is summed with the other end's (embed group)
  int vocab_local = 0;              // padded vocab rows per TP rank
};

// One StageShape per pipeline stage (layers split as loom splits them: even, extra layers to the
// earlier stages). Needs pp <= n_layer and tp dividing n_head and d_model.
std::vector<StageShape> stage_shapes(const ModelConfig& m, int tp, int pp);

// Micro-batches in flight on `stage`: 1F1B min(pp - stage, m), GPipe m (equal to
// max_in_flight of the schedule's action list).
int slots_of(const std::string& schedule, int pp, int stage, int microbatches);

}  // namespace loom::plan
