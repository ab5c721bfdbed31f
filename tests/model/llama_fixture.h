// The tiny Llama of tests/reference/make_llama_fixtures.py: loom config, batches, logits.
#pragma once
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "tests/support/fixture.h"
#include "train/trainer.h"

namespace loom::test {

inline const std::string kLlamaWeights = "tests/reference/fixtures/llama_tiny_weights.h5";
inline const std::string kLlamaFixture = "tests/reference/fixtures/llama_tiny_fixture.h5";
inline const std::string kLlamaHfDir = "tests/reference/fixtures/llama_tiny_hf";

// The fixture's model and optimizer as a loom config (single rank), weights from `init_from`.
inline Config llama_fixture_config(const std::string& init_from) {
  const std::string fx = source_path(kLlamaFixture);
  Config c;
  c.model.arch = "llama";
  c.model.n_layer = int(read_h5_attr(fx, "n_layer"));
  c.model.n_head = int(read_h5_attr(fx, "n_head"));
  c.model.n_kv_head = int(read_h5_attr(fx, "n_kv_head"));
  c.model.d_model = int(read_h5_attr(fx, "d_model"));
  c.model.ffn_hidden = int(read_h5_attr(fx, "ffn_hidden"));
  c.model.vocab_size = int(read_h5_attr(fx, "vocab_size"));
  c.model.max_positions = int(read_h5_attr(fx, "max_positions"));
  c.model.seq_len = int(read_h5_attr(fx, "seq_len"));
  c.model.rope_theta = read_h5_attr(fx, "rope_theta");
  c.model.norm_eps = read_h5_attr(fx, "norm_eps");
  c.model.tie_embeddings = read_h5_attr(fx, "tie_embeddings") != 0;
  const int B = int(read_h5_attr(fx, "batch"));
  c.parallel.dp = c.parallel.tp = c.parallel.pp = 1;
  c.parallel.micro_batch_size = B;
  c.train.global_batch_size = B;
  c.train.steps = int(read_h5_attr(fx, "steps"));
  c.train.grad_clip = read_h5_attr(fx, "grad_clip");
  c.train.init_from = init_from;
  c.optimizer.lr = read_h5_attr(fx, "lr");
  c.optimizer.schedule = "constant";
  c.optimizer.warmup_steps = 0;
  c.optimizer.beta1 = read_h5_attr(fx, "beta1");
  c.optimizer.beta2 = read_h5_attr(fx, "beta2");
  c.optimizer.eps = read_h5_attr(fx, "eps");
  c.optimizer.weight_decay = read_h5_attr(fx, "weight_decay");
  return c;
}

// Step s (1-based) of the fixture uses batch s-1 of its inputs/targets (batches contiguous).
inline SampleFn llama_fixture_samples(const Config& c) {
  const std::string fx = source_path(kLlamaFixture);
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
inline std::vector<float> llama_step1_logits(Trainer& tr, const Config& c) {
  GPTStage& st = tr.stage();
  const int N = st.tokens_per_micro_batch(), V = c.model.vocab_size;
  const int Vp = tr.layout().vocab_local();
  std::vector<int32_t> in(static_cast<size_t>(N)), tg(static_cast<size_t>(N));
  llama_fixture_samples(c)(0, c.parallel.micro_batch_size, in.data(), tg.data());
  st.reset_loss();
  st.forward(0, in.data(), tg.data(), 0.0f);  // eval mode: logits stay readable
  std::vector<float> all(size_t(N) * Vp), got(size_t(N) * V);
  st.logits_to_host(all.data());
  for (int n = 0; n < N; ++n)
    std::memcpy(&got[size_t(n) * V], &all[size_t(n) * Vp], size_t(V) * sizeof(float));
  return got;
}

}  // namespace loom::test
