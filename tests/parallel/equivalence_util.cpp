// Equivalence-test support: config, synthetic data, layout runs, weight comparison.
#include "tests/parallel/equivalence_util.h"

#include <cmath>

#include "core/rng.h"

namespace loom::test {

Config tiny_parallel_config() {
  Config c;
  c.model.n_layer = 4;
  c.model.n_head = 4;
  c.model.d_model = 32;
  c.model.vocab_size = 97;
  c.model.seq_len = 8;
  c.train.global_batch_size = 8;
  c.train.steps = 10;
  c.train.seed = 11;
  c.train.grad_clip = 1.0;
  c.optimizer.lr = 1e-2;
  c.optimizer.min_lr = 1e-3;
  c.optimizer.warmup_steps = 2;
  c.optimizer.schedule = "cosine";
  c.optimizer.weight_decay = 0.1;
  c.parallel.dp = c.parallel.pp = c.parallel.tp = 1;
  c.parallel.micro_batch_size = 2;
  return c;
}

SampleFn synthetic_samples(int vocab, int seq_len) {
  return [=](int64_t first, int rows, int32_t* in, int32_t* tg) {
    for (int r = 0; r < rows; ++r) {
      SplitMix64 g(uint64_t(first + r) * 7919u + 17u);
      int32_t prev = int32_t(g.below(uint64_t(vocab)));
      for (int t = 0; t < seq_len; ++t) {
        // A learnable pattern (next = prev + 1 mostly) so losses fall.
        int32_t next = g.below(4) == 0 ? int32_t(g.below(uint64_t(vocab))) : (prev + 1) % vocab;
        in[r * seq_len + t] = prev;
        tg[r * seq_len + t] = next;
        prev = next;
      }
    }
  };
}

RunResult run_layout(const Config& cfg, MPI_Comm world) {
  Grid grid(cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.tp, cfg.parallel.order);
  auto pc = make_parallel_ctx(grid, world);
  Trainer trainer(cfg, *pc, synthetic_samples(cfg.model.vocab_size, cfg.model.seq_len));
  trainer.init_weights();
  RunResult out;
  for (int s = 1; s <= cfg.train.steps; ++s) out.losses.push_back(trainer.train_step(s).loss);
  out.weights = gather_canonical(trainer.layout(), trainer.full_params().data(), *pc);
  out.memory = trainer.optimizer().memory();
  return out;
}

std::pair<double, std::string> worst_weight_error(const std::map<std::string, CanonicalTensor>& got,
                                                  const std::map<std::string, CanonicalTensor>& ref,
                                                  int d_model) {
  double worst = 0;
  std::string name;
  if (got.size() != ref.size()) return {INFINITY, "tensor count differs"};
  for (const auto& [n, r] : ref) {
    auto it = got.find(n);
    if (it == got.end() || it->second.data.size() != r.data.size()) return {INFINITY, n};
    bool qkv_bias = n.find("c_attn.bias") != std::string::npos;
    double num = 0, den = 0;
    for (size_t i = 0; i < r.data.size(); ++i) {
      if (qkv_bias && i >= size_t(d_model) && i < size_t(2 * d_model)) continue;
      double d = double(it->second.data[i]) - double(r.data[i]);
      num += d * d;
      den += double(r.data[i]) * r.data[i];
    }
    double e = std::sqrt(num / (den > 0 ? den : 1));
    if (e > worst) worst = e, name = n;
  }
  return {worst, name};
}

}  // namespace loom::test
