// Sampling of the next token from one row of logits.
#include "train/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "core/rng.h"

namespace loom {

std::string sample_options_problem(const SampleOptions& opt) {
  if (!(opt.temperature >= 0.0f) || !std::isfinite(opt.temperature))
    return str("temperature ", opt.temperature, " must be a finite number >= 0 (0: greedy)");
  if (opt.top_k < 0) return str("top-k ", opt.top_k, " must be >= 0 (0: no limit)");
  if (!(opt.top_p > 0.0f && opt.top_p <= 1.0f))
    return str("top-p ", opt.top_p, " must be in (0, 1] (1: no limit)");
  return "";
}

int32_t sample_token(const float* logits, int V, const SampleOptions& opt, uint64_t sequence,
                     uint64_t position) {
  LOOM_CHECK(V >= 1, "sampling from ", V, " ids");
  if (opt.temperature <= 0.0f) return int32_t(std::max_element(logits, logits + V) - logits);
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const int k = (opt.top_k > 0 && opt.top_k < V) ? opt.top_k : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  const double top = logits[order[0]];
  std::vector<double> p(static_cast<size_t>(k));
  double sum = 0;
  for (size_t i = 0; i < size_t(k); ++i)
    sum += p[i] = std::exp((double(logits[order[i]]) - top) / opt.temperature);
  // The nucleus: the shortest prefix (most likely first) whose mass reaches top_p of the sum.
  size_t keep = size_t(k);
  if (opt.top_p < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < size_t(k); ++i) {
      mass += p[i];
      if (mass >= double(opt.top_p) * sum) {
        keep = i + 1;
        break;
      }
    }
    sum = std::accumulate(p.begin(), p.begin() + long(keep), 0.0);
  }
  const uint64_t index = (sequence << 32) ^ position;
  double u = double(uniform01(stream_key(opt.seed, "sample"), index)) * sum;
  for (size_t i = 0; i < keep; ++i) {
    u -= p[i];
    if (u <= 0) return order[i];
  }
  return order[keep - 1];
}

float token_logprob(const float* logits, int V, int32_t id) {
  LOOM_CHECK(id >= 0 && id < V, "logprob of id ", id, " outside the ", V, " sampled ids");
  double mx = logits[0];
  for (int i = 1; i < V; ++i) mx = std::max(mx, double(logits[i]));
  double sum = 0;
  for (int i = 0; i < V; ++i) sum += std::exp(double(logits[i]) - mx);
  return float(double(logits[id]) - mx - std::log(sum));
}

}  // namespace loom
