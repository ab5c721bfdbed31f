// Sampling and the autoregressive generation loop.
#include "train/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "core/rng.h"

namespace loom {

int32_t sample_token(const float* logits, int V, const SampleOptions& opt, uint64_t index) {
  if (opt.temperature <= 0.0f)
    return int32_t(std::max_element(logits, logits + V) - logits);
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  int k = (opt.top_k > 0 && opt.top_k < V) ? opt.top_k : V;
  // The k largest logits, by value then id (stable, so the result does not depend on sort).
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  const double top = logits[order[0]];
  std::vector<double> p(static_cast<size_t>(k));
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[size_t(i)] = std::exp((logits[order[size_t(i)]] - top) / opt.temperature);
  double u = double(uniform01(stream_key(opt.seed, "sample"), index)) * sum;
  for (int i = 0; i < k; ++i) {
    u -= p[size_t(i)];
    if (u <= 0) return order[size_t(i)];
  }
  return order[size_t(k - 1)];
}

void generate(GPTStage& model, int vocab_size, std::vector<int32_t>& ids, const SampleOptions& opt) {
  const int T = model.tokens_per_micro_batch();
  const ParamLayout& l = model.layout();
  LOOM_CHECK(l.first_stage() && l.last_stage() && l.tp() == 1, "generate needs the whole model");
  LOOM_CHECK(!ids.empty() && int(ids.size()) <= T, "prompt of ", ids.size(), " ids, context ", T);
  std::vector<int32_t> window(static_cast<size_t>(T), 0);
  Backend& be = model.backend();
  Buffer dwindow(window.size() * sizeof(int32_t), be.device());  // the forward reads backend memory
  std::vector<float> logits(size_t(T) * size_t(l.vocab_local()));  // (T, Vl)
  for (int n = 0; n < opt.max_tokens; ++n) {
    const size_t len = std::min(ids.size(), size_t(T));
    std::copy(ids.end() - long(len), ids.end(), window.begin());  // rest: any id, causal mask
    be.from_host(dwindow.data(), window.data(), window.size() * sizeof(int32_t));
    model.forward(0, static_cast<const int32_t*>(dwindow.data()), nullptr, 0.0f);
    model.logits_to_host(logits.data());
    const float* row = logits.data() + (len - 1) * size_t(l.vocab_local());
    int32_t next = sample_token(row, vocab_size, opt, uint64_t(ids.size()));
    ids.push_back(next);
    if (next == opt.stop_token) break;
  }
}

}  // namespace loom
