// Periodic Megatron-style greedy blending index (see blend.h).
#include "data/blend.h"

#include <cmath>

#include "core/check.h"

namespace loom {

BlendIndex::BlendIndex(const std::vector<double>& weights, int64_t period) : period_(period) {
  LOOM_CHECK(!weights.empty() && weights.size() <= 65535, "blend of ", weights.size(), " datasets");
  LOOM_CHECK(period > 0 && period <= (int64_t(1) << 31), "blend period ", period);
  double sum = 0;
  for (double w : weights) {
    LOOM_CHECK(std::isfinite(w) && w > 0, "blend weight ", w);
    sum += w;
  }
  for (double w : weights) weights_.push_back(w / sum);
  const int nd = int(weights_.size());
  counts_.assign(nd, 0);
  if (nd == 1) {
    counts_[0] = period_;
    return;
  }
  dataset_.resize(size_t(period_));
  rank_.resize(size_t(period_));
  for (int64_t i = 0; i < period_; ++i) {
    int best = 0;
    double best_err = weights_[0] * double(i + 1) - double(counts_[0]);
    for (int d = 1; d < nd; ++d) {
      double err = weights_[d] * double(i + 1) - double(counts_[d]);
      if (err > best_err) best = d, best_err = err;
    }
    dataset_[size_t(i)] = uint16_t(best);
    rank_[size_t(i)] = uint32_t(counts_[best]++);
  }
}

std::pair<int, int64_t> BlendIndex::locate(int64_t i) const {
  LOOM_CHECK(i >= 0, "negative sample index ", i);
  if (weights_.size() == 1) return {0, i};
  const int64_t q = i / period_, r = i % period_;
  const int d = dataset_[size_t(r)];
  return {d, q * counts_[d] + int64_t(rank_[size_t(r)])};
}

}  // namespace loom
