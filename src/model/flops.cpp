// Parameter and FLOP counts of a GPT-2 or Llama model, dense or Mixture of Experts.
#include "model/flops.h"

namespace loom {

namespace {
// One expert's (or the dense MLP's) parameters.
int64_t mlp_params(const ModelConfig& m) {
  const int64_t C = m.d_model, F = m.ffn();
  return m.llama() ? 3 * C * F : C * F + F + F * C + C;
}

// Parameters of the model with `experts` MLPs per layer (and a router when MoE).
int64_t params_with_experts(const ModelConfig& m, int64_t experts) {
  ModelConfig dense = m;
  dense.moe.num_experts = 0;
  if (!m.is_moe()) return count_params(dense);
  const int64_t extra = (experts - 1) * mlp_params(m) + int64_t(m.d_model) * m.moe.num_experts;
  return count_params(dense) + m.n_layer * extra;
}
}  // namespace

int64_t count_params(const ModelConfig& m) {
  if (m.is_moe()) return params_with_experts(m, m.moe.num_experts);
  const int64_t C = m.d_model, V = m.vocab_size, F = m.ffn();
  const int64_t NH = m.n_head, NKV = m.kv_heads(), D = m.head_dim();
  int64_t per_layer, n;
  if (m.llama()) {
    // RMSNorm gains (2C), q|k|v (C, (NH+2NKV)D), o (NH*D, C), gate|up (C, 2F), down (F, C).
    per_layer = 2 * C + C * (NH + 2 * NKV) * D + NH * D * C + 3 * C * F;
    n = V * C + m.n_layer * per_layer + C;  // wte, blocks, final RMSNorm gain
  } else {
    // LayerNorm gains and biases (4C), qkv, proj, fc, fc proj with their biases.
    per_layer = 4 * C + (C * 3 * C + 3 * C) + (C * C + C) + (C * F + F) + (F * C + C);
    n = V * C + int64_t(m.positions()) * C + m.n_layer * per_layer + 2 * C;
  }
  if (!m.tie_embeddings) n += V * C;
  return n;
}

int64_t count_active_params(const ModelConfig& m) {
  return m.is_moe() ? params_with_experts(m, m.moe.top_k) : count_params(m);
}

double flops_per_token(const ModelConfig& m) {
  const double C = m.d_model;
  const double wpe = m.llama() ? 0.0 : double(m.positions()) * C;
  const double lookup = m.tie_embeddings ? 0.0 : double(m.vocab_size) * C;  // untied wte
  const double n = double(count_active_params(m)) - wpe - lookup;
  const double attn_width = double(m.n_head) * m.head_dim();  // NH * D
  return 6.0 * n + 12.0 * m.n_layer * attn_width * m.seq_len;
}

}  // namespace loom
