// The learning-rate schedule.
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace loom {

double lr_at(const OptimizerConfig& o, int step, int total_steps) {
  if (o.warmup_steps > 0 && step <= o.warmup_steps) return o.lr * step / o.warmup_steps;
  if (o.schedule == "constant") return o.lr;
  int decay = o.decay_steps > 0 ? o.decay_steps : total_steps;
  double span = double(decay - o.warmup_steps);
  double p = span > 0 ? std::clamp((step - o.warmup_steps) / span, 0.0, 1.0) : 1.0;
  if (o.schedule == "linear") return o.lr - (o.lr - o.min_lr) * p;
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(M_PI * p));
}

}  // namespace loom
