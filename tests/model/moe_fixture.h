// The tiny MoE models of tests/reference/make_moe_fixtures.py: loom config, batches, logits.
#pragma once
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "tests/support/fixture.h"
#include "train/trainer.h"

namespace loom::test {

// One fixture: a family (gpt2 | llama) and a capacity mode (dropless | capacity).
struct MoeFixture {
  std::string arch, mode;
  std::string weights() const { return "tests/reference/fixtures/moe_" + arch + "_weights.h5"; }
  std::string file() const {
    return "tests/reference/fixtures/moe_" + arch + "_" + mode + "_fixture.h5";
  }
  std::string label() const { return arch + "_" + mode; }
};

// The fixture's model, MoE layer and optimizer as a loom config (single rank, one micro-batch
// holding the whole global batch), weights from the fixture's canonical weights file.
inline Config moe_fixture_config(const MoeFixture& m) {
  const std::string fx = source_path(m.file());
  auto attr = [&](const char* k) { return read_h5_attr(fx, k); };
  Config c;
  c.model.arch = m.arch;
  c.model.n_layer = int(attr("n_layer"));
  c.model.n_head = int(attr("n_head"));
  c.model.d_model = int(attr("d_model"));
  c.model.ffn_hidden = int(attr("ffn_hidden"));
  c.model.vocab_size = int(attr("vocab_size"));
  c.model.max_positions = int(attr("max_positions"));
  c.model.seq_len = int(attr("seq_len"));
  c.model.tie_embeddings = attr("tie_embeddings") != 0;
  if (m.arch == "llama") {
    c.model.n_kv_head = int(attr("n_kv_head"));
    c.model.rope_theta = attr("rope_theta");
    c.model.norm_eps = attr("norm_eps");
  }
  c.model.moe.num_experts = int(attr("num_experts"));
  c.model.moe.top_k = int(attr("top_k"));
  c.model.moe.capacity_factor = attr("capacity_factor");
  c.model.moe.aux_loss_coef = attr("aux_loss_coef");
  c.model.moe.z_loss_coef = attr("z_loss_coef");
  const int B = int(attr("batch"));
  c.parallel.dp = c.parallel.tp = c.parallel.pp = 1;
  c.parallel.micro_batch_size = B;
  c.train.global_batch_size = B;
  c.train.steps = int(attr("steps"));
  c.train.grad_clip = attr("grad_clip");
  c.train.init_from = source_path(m.weights());
  c.optimizer.lr = attr("lr");
  c.optimizer.schedule = "constant";
  c.optimizer.warmup_steps = 0;
  c.optimizer.beta1 = attr("beta1");
  c.optimizer.beta2 = attr("beta2");
  c.optimizer.eps = attr("eps");
  c.optimizer.weight_decay = attr("weight_decay");
  return c;
}

// Step s (1-based) of the fixture uses batch s-1 of its inputs/targets (batches contiguous).
inline SampleFn moe_fixture_samples(const MoeFixture& m, const Config& c) {
  const std::string fx = source_path(m.file());
  auto inputs = std::make_shared<std::vector<int>>(read_h5_int(fx, "inputs"));
  auto targets = std::make_shared<std::vector<int>>(read_h5_int(fx, "targets"));
  const int T = c.model.seq_len;
  return [=](int64_t first, int rows, int32_t* in, int32_t* tg) {
    for (int r = 0; r < rows; ++r)
      for (int t = 0; t < T; ++t) {
        const size_t i = size_t((first + r) * T + t);  // sample index x T
        in[r * T + t] = (*inputs)[i];
        tg[r * T + t] = (*targets)[i];
      }
  };
}

// Eval-mode forward of step 1's batch; the logits (B*T, V) without the vocab padding.
inline std::vector<float> moe_step1_logits(const MoeFixture& m, Trainer& tr, const Config& c) {
  GPTStage& st = tr.stage();
  const int N = st.tokens_per_micro_batch(), V = c.model.vocab_size;
  const int Vp = tr.layout().vocab_local();
  std::vector<int32_t> in(static_cast<size_t>(N)), tg(static_cast<size_t>(N));
  moe_fixture_samples(m, c)(0, c.parallel.micro_batch_size, in.data(), tg.data());
  st.reset_loss();
  st.forward(0, in.data(), tg.data(), 0.0f);  // eval mode: logits stay readable
  std::vector<float> all(size_t(N) * Vp), got(size_t(N) * V);
  st.logits_to_host(all.data());
  for (int n = 0; n < N; ++n)
    std::memcpy(&got[size_t(n) * V], &all[size_t(n) * Vp], size_t(V) * sizeof(float));
  return got;
}

}  // namespace loom::test
