// AdamW over a rank's flat parameter buffer, with weight decay only on >= 2-D parameters.
#pragma once
#include "config/config.h"
#include "core/buffer.h"
#include "model/param_layout.h"

namespace loom {

class AdamW {
 public:
  AdamW(const ParamLayout& layout, const OptimizerConfig& cfg);
  // One update of every parameter; grads are multiplied by grad_scale first (clipping).
  void step(float* params, const float* grads, double lr, float grad_scale, int step);
  size_t state_bytes() const { return m_.bytes() + v_.bytes(); }
  float* m() { return static_cast<float*>(m_.data()); }
  float* v() { return static_cast<float*>(v_.data()); }

 private:
  const ParamLayout& layout_;
  OptimizerConfig cfg_;
  Buffer m_, v_;
};

}  // namespace loom
