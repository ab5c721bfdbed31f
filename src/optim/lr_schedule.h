// Learning-rate schedule: linear warm-up, then cosine, linear or constant decay to min_lr.
#pragma once
#include "config/config.h"

namespace loom {

// LR of optimizer step `step` (1-based). Warm-up: lr * step / warmup_steps for step <=
// warmup_steps. Then progress p = (step - warmup) / (decay_steps - warmup), clamped to [0, 1],
// decay_steps defaulting to total_steps: cosine min_lr + (lr-min_lr)(1+cos(pi p))/2, linear
// lr - (lr-min_lr) p, constant lr.
double lr_at(const OptimizerConfig& o, int step, int total_steps);

}  // namespace loom
