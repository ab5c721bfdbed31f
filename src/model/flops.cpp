// Parameter and FLOP counts of a GPT-2 model.
#include "model/flops.h"

namespace loom {

int64_t count_params(const ModelConfig& m) {
  int64_t C = m.d_model, V = m.vocab_size;
  int64_t per_layer =
      2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * 4 * C + 4 * C) + (4 * C * C + C);
  int64_t n = V * C + int64_t(m.positions()) * C + m.n_layer * per_layer + 2 * C;
  if (!m.tie_embeddings) n += V * C;
  return n;
}

double flops_per_token(const ModelConfig& m) {
  double n = double(count_params(m)) - double(m.positions()) * m.d_model;
  return 6.0 * n + 12.0 * m.n_layer * double(m.d_model) * m.seq_len;
}

}  // namespace loom
