// AdamW step: one kernel call per parameter, with that parameter's decay.
#include "optim/adamw.h"

#include "kernels/adamw.h"

namespace loom {

AdamW::AdamW(const ParamLayout& layout, const OptimizerConfig& cfg)
    : layout_(layout), cfg_(cfg) {
  m_ = Buffer(layout.total() * sizeof(float), Device::CPU);
  v_ = Buffer(layout.total() * sizeof(float), Device::CPU);
  m_.zero();
  v_.zero();
}

void AdamW::step(float* params, const float* grads, double lr, float grad_scale, int step) {
  for (const ParamSpec& p : layout_.params()) {
    cpu::AdamWParams a{float(lr), float(cfg_.beta1), float(cfg_.beta2), float(cfg_.eps),
                       p.decay ? float(cfg_.weight_decay) : 0.0f, step, grad_scale};
    cpu::adamw_update(params + p.offset, grads + p.offset, m() + p.offset, v() + p.offset,
                      p.numel(), a);
  }
}

}  // namespace loom
