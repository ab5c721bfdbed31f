// Precision table, per-stage parameter shapes from ParamLayout, and schedule slot counts.
#include "plan/layout_model.h"

#include <algorithm>
#include <map>

#include "core/check.h"
#include "layout/param_layout.h"

namespace loom::plan {

DeviceTraits PlanModel::traits() const {
  DeviceTraits t;
  t.device = device == "cuda" ? Device::CUDA : Device::CPU;
  t.act = prec.act == 4 ? DType::F32 : prec.name == "fp16" ? DType::F16 : DType::BF16;
  return t;
}

Precision precision_of(const std::string& dtype) {
  Precision p;
  p.name = dtype;
  if (dtype == "bf16" || dtype == "fp16") {
    p.param = 2, p.grad = 4, p.act = 2, p.master = 4, p.moment = 4;
  } else {
    LOOM_CHECK(dtype == "fp32", "unknown dtype ", dtype);
  }
  return p;
}

std::vector<StageShape> stage_shapes(const ModelConfig& m, int tp, int pp) {
  std::vector<StageShape> out;
  out.reserve(size_t(pp));
  for (int s = 0; s < pp; ++s) {
    // TP rank 0 stands for the stage: every TP rank holds the same number of elements.
    ParamLayout layout(m, tp, 0, pp, s);
    StageShape sh;
    sh.stage = s;
    sh.num_layers = layout.layers().num_layers;
    sh.first = layout.first_stage();
    sh.last = layout.last_stage();
    sh.total = layout.total();
    sh.vocab_local = layout.vocab_local();
    sh.tied_across_stages = m.tie_embeddings && pp > 1;
    std::map<int, uint64_t> per_layer;
    sh.layer_begin = layout.total();
    for (const ParamSpec& p : layout.params()) {
      if (p.layer >= 0) {
        sh.layer_begin = std::min<uint64_t>(sh.layer_begin, p.offset);
        per_layer[p.layer] += p.numel();
        sh.layer_elems += p.numel();
      } else {
        sh.other += p.numel();
        if (p.name == "wte.weight") sh.wte = p.numel();
      }
    }
    for (const auto& kv : per_layer) sh.widest_layer = std::max(sh.widest_layer, kv.second);
    out.push_back(sh);
  }
  return out;
}

int slots_of(const std::string& schedule, int pp, int stage, int microbatches) {
  if (schedule == "gpipe") return microbatches;
  return std::min(pp - stage, microbatches);
}

}  // namespace loom::plan
