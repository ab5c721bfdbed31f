// validate()'s checks of the model section: sizes, and the keys of the gpt2 and llama families.
#include <algorithm>

#include "config/checker.h"

namespace loom::validation {

namespace {
// The keys of the model families: gpt2 (LayerNorm, learned positions, GELU) and llama (RMSNorm,
// RoPE, SwiGLU, grouped-query attention).
void check_family(const ModelConfig& m, Checker& c) {
  if (!c.one_of("model.arch", m.arch, {"gpt2", "llama"})) return;
  c.at_least("model.n_kv_head", m.n_kv_head, 0, "set 0 (= n_head) or the number of kv heads");
  c.at_least("model.ffn_hidden", m.ffn_hidden, 0,
             "set 0 (the family's default) or the MLP hidden size");
  if (m.n_head > 0 && m.n_kv_head > 0 && m.n_head % m.n_kv_head != 0) {
    std::vector<std::string> ok;
    for (int k = 1; k <= m.n_head; ++k)
      if (m.n_head % k == 0) ok.push_back(std::to_string(k));
    c.add(str("model.n_kv_head: ", m.n_kv_head, " does not divide model.n_head=", m.n_head,
              "; choose n_kv_head from ", join(ok)));
  }
  if (!m.llama()) {
    if (m.n_kv_head > 0 && m.n_kv_head != m.n_head)
      c.add(str("model.n_kv_head: ", m.n_kv_head, " needs model.arch: llama (gpt2 attention has ",
                "n_head kv heads); set n_kv_head: 0 or arch: llama"));
    if (m.norm_eps != 1e-5)
      c.add(str("model.norm_eps: ", format_double(m.norm_eps),
                " is fixed at 1e-5 for gpt2's LayerNorm; remove it or set arch: llama"));
    return;
  }
  if (!(m.rope_theta > 0))
    c.add(str("model.rope_theta: ", format_double(m.rope_theta),
              " must be > 0; set the RoPE base, e.g. 10000 (Llama 2) or 500000 (Llama 3)"));
  if (!(m.norm_eps > 0 && m.norm_eps < 1))
    c.add(str("model.norm_eps: ", format_double(m.norm_eps),
              " must be in (0, 1); set the RMSNorm epsilon, e.g. 1e-5"));
  if (m.n_head > 0 && m.d_model > 0 && m.d_model % m.n_head == 0 && m.head_dim() % 2 != 0)
    c.add(str("model.d_model: head size d_model/n_head = ", m.head_dim(),
              " is odd; RoPE rotates pairs of dimensions, so choose d_model and n_head with an "
              "even quotient"));
  if (m.max_positions > 0)
    c.add(str("model.max_positions: ", m.max_positions,
              " has no effect on llama (RoPE has no position table); remove it"));
}

// model.moe.* (docs/moe.md).
void check_moe(const MoeConfig& moe, Checker& c) {
  c.at_least("model.moe.num_experts", moe.num_experts, 0,
             "set the experts per layer, or 0 for a dense model");
  if (moe.num_experts <= 0) return;
  if (moe.top_k < 1 || moe.top_k > moe.num_experts)
    c.add(str("model.moe.top_k: ", moe.top_k, " must be between 1 and model.moe.num_experts=",
              moe.num_experts, "; choose e.g. ", std::min(2, moe.num_experts)));
  if (moe.capacity_factor < 0)
    c.add(str("model.moe.capacity_factor: ", format_double(moe.capacity_factor),
              " must be > 0 (tokens over capacity are dropped), or 0 / absent for dropless; ",
              "e.g. 1.25"));
  c.non_negative("model.moe.aux_loss_coef", moe.aux_loss_coef, "e.g. 0.01; 0 turns it off");
  c.non_negative("model.moe.z_loss_coef", moe.z_loss_coef, "e.g. 0.001; 0 turns it off");
}

}  // namespace

void check_model(const ModelConfig& m, Checker& c) {
  c.at_least("model.n_layer", m.n_layer, 1, "set the number of transformer blocks, e.g. 12");
  c.at_least("model.n_head", m.n_head, 1, "set the number of attention heads, e.g. 12");
  c.at_least("model.d_model", m.d_model, 1, "set the hidden size, e.g. 768");
  c.at_least("model.vocab_size", m.vocab_size, 1,
             "set the tokenizer's vocabulary size (50257 for gpt2, 257 for bytes)");
  c.at_least("model.seq_len", m.seq_len, 1, "set the training context length, e.g. 1024");
  c.at_least("model.max_positions", m.max_positions, 0,
             "set 0 (= seq_len) or the number of learned positions");
  if (m.n_head > 0 && m.d_model > 0 && m.d_model % m.n_head != 0)
    c.add(str("model.d_model: ", m.d_model, " is not divisible by model.n_head=", m.n_head,
              "; set d_model to ", nearest_multiples(m.d_model, m.n_head), ", or change n_head"));
  if (m.max_positions > 0 && m.seq_len > m.max_positions)
    c.add(str("model.seq_len: ", m.seq_len, " exceeds model.max_positions=", m.max_positions,
              "; set seq_len <= ", m.max_positions, " or raise max_positions"));
  if (m.dropout != 0.0)
    c.add(str("model.dropout: ", format_double(m.dropout), " is not supported yet; set 0"));
  check_family(m, c);
  check_moe(m.moe, c);
}

}  // namespace loom::validation
