// Weighted blending of datasets (Megatron semantics): weights are normalized and sample i of
// the blend goes to the dataset that is furthest behind its share, so every prefix of the
// blended order holds each dataset in proportion to its weight.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace loom {

// Megatron's greedy rule (build_blending_indices): for i = 0, 1, ... pick the dataset d with the
// largest w_d * (i + 1) - count_d (lowest d on ties). To stay a pure O(1) function of the global
// index, the choice is computed once for a period of P samples and repeated: sample i is in
// period i / P, where dataset d contributes C_d (= round(w_d * P) within 1) samples. Within any
// prefix of n samples, |count_d - w_d * n| <= 1 + n / P.
class BlendIndex {
 public:
  static constexpr int64_t kPeriod = 1 << 16;
  explicit BlendIndex(const std::vector<double>& weights, int64_t period = kPeriod);

  const std::vector<double>& weights() const { return weights_; }  // normalized
  // Global sample i -> (dataset d, k): the k-th sample (0-based) drawn from d.
  std::pair<int, int64_t> locate(int64_t i) const;
  int64_t per_period(int d) const { return counts_[d]; }
  int64_t period() const { return period_; }

 private:
  std::vector<double> weights_;
  int64_t period_;
  std::vector<uint16_t> dataset_;   // [period]
  std::vector<uint32_t> rank_;      // [period]: index of this sample among its dataset's
  std::vector<int64_t> counts_;     // [datasets]: samples per period
};

}  // namespace loom
