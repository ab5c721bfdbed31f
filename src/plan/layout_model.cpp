// Precision table, per-stage parameter shapes from ParamLayout, and schedule slot counts.
#include "plan/layout_model.h"

#include "core/check.h"
#include "layout/param_layout.h"

namespace loom::plan {

DeviceTraits PlanModel::traits() const {
  return DeviceTraits{device == "cuda" ? Device::CUDA : Device::CPU, prec.dtype};
}

Precision precision_of(const std::string& dtype) {
  Precision p;
  p.name = dtype;
  p.dtype = parse_train_dtype(dtype);
  p.act = int(dtype_size(p.dtype));
  // The ZeRO all-gather moves the fp32 master weights; the compute copy is refreshed locally.
  p.param = 4, p.grad = 4;
  return p;
}

std::vector<StageShape> stage_shapes(const ModelConfig& m, int tp, int pp, int v, int ep) {
  std::vector<StageShape> out;
  out.reserve(size_t(pp));
  // TP rank 0 stands for the stage: every TP (and expert-parallel) rank holds the same number of
  // elements.
  for (int s = 0; s < pp; ++s)
    out.push_back(stage_params(ParamLayout(m, tp, 0, pp, s, v, {}, ep, 0)));
  return out;
}

}  // namespace loom::plan
