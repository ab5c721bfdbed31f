// Loss-scale bookkeeping and the overflow check.
#include "optim/loss_scale.h"

#include <cmath>

#include "core/check.h"

namespace loom {

LossScaler::LossScaler(float init_scale, float growth, float backoff, int growth_interval)
    : scale_(init_scale), growth_(growth), backoff_(backoff), interval_(growth_interval) {
  LOOM_CHECK(init_scale > 0 && growth > 1 && backoff > 0 && backoff < 1 && growth_interval > 0,
             "loss scaler(", init_scale, ", ", growth, ", ", backoff, ", ", growth_interval, ")");
}

bool LossScaler::update(bool overflow) {
  if (overflow) {
    scale_ *= backoff_;
    clean_ = 0;
    ++skipped_;
    return false;
  }
  if (++clean_ == interval_) {
    scale_ *= growth_;
    clean_ = 0;
  }
  return true;
}

void LossScaler::restore(float scale, int clean_steps, int skipped) {
  LOOM_CHECK(scale > 0 && clean_steps >= 0 && skipped >= 0, "loss scaler state ", scale, ", ",
             clean_steps, ", ", skipped);
  scale_ = scale;
  clean_ = clean_steps;
  skipped_ = skipped;
}

bool has_nonfinite(const float* x, size_t n) {
  bool bad = false;
#pragma omp parallel for reduction(|| : bad) schedule(static)
  for (size_t i = 0; i < n; ++i) bad = bad || !std::isfinite(x[i]);
  return bad;
}

}  // namespace loom
