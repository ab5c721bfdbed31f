// Equivalence-test support: config, synthetic data, layout runs, weight comparison.
#include "tests/parallel/equivalence_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "core/rng.h"
#include "tests/support/mpi_test_env.h"

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

Config tiny_llama_config(int kv_heads, bool tied) {
  Config c = tiny_parallel_config();
  c.model.arch = "llama";
  c.model.n_head = 8;
  c.model.n_kv_head = kv_heads;
  c.model.ffn_hidden = 48;
  c.model.rope_theta = 100.0;
  c.model.norm_eps = 1e-5;
  c.model.tie_embeddings = tied;
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

// AdamW's first moment after step 1 is (1 - beta1) times the clipped gradient. Each DP rank
// holds the moments of its ZeRO shards (all of them at stage 0); the optimizer gathers them
// into the whole flat buffer over each group.
std::map<std::string, CanonicalTensor> first_moment_as_gradient(Trainer& trainer, ParallelCtx& pc,
                                                                double beta1) {
  const ParamLayout& layout = trainer.layout();
  ZeroOptimizer& opt = trainer.optimizer();
  // Every owner's moments, gathered into the whole flat buffer on every rank of its ZeRO groups.
  std::vector<float> flat(opt.state_gather_elems());
  opt.gather_state(opt.m(), flat.data(), true);
  flat.resize(layout.total());
  for (float& x : flat) x = float(double(x) / (1.0 - beta1));
  return gather_canonical(layout, flat.data(), pc);
}

RunResult run_layout(const Config& cfg, MPI_Comm world, SampleFn samples) {
  Grid grid(cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.tp, cfg.parallel.order, cfg.parallel.cp);
  auto pc = make_parallel_ctx(grid, world);
  Trainer trainer(cfg, *pc,
                  samples ? samples : synthetic_samples(cfg.model.vocab_size, cfg.model.seq_len));
  trainer.init_weights();
  RunResult out;
  for (int s = 1; s <= cfg.train.steps; ++s) {
    StepStats st = trainer.train_step(s);
    out.losses.push_back(st.loss);
    out.lrs.push_back(st.lr);
    if (s == 1) out.grads1 = first_moment_as_gradient(trainer, *pc, cfg.optimizer.beta1);
  }
  out.weights = gather_canonical(trainer.layout(), trainer.full_params().data(), *pc);
  out.memory = trainer.optimizer().memory();
  return out;
}

RunDiff compare_runs(const RunResult& got, const RunResult& ref, int d_model) {
  RunDiff d;
  if (got.losses.size() != ref.losses.size() || ref.losses.empty()) {
    d.first_loss = d.later_loss = INFINITY;
    return d;
  }
  auto rel = [&](size_t s) {
    return std::fabs(got.losses[s] - ref.losses[s]) / std::fabs(ref.losses[s]);
  };
  d.first_loss = rel(0);
  for (size_t s = 1; s < ref.losses.size(); ++s)
    if (worse(rel(s), d.later_loss)) d.later_loss = rel(s), d.later_loss_step = int(s) + 1;
  if (!got.grads1.empty() && !ref.grads1.empty())
    d.grad1 = worst_relative(got.grads1, ref.grads1, d_model);
  double steps_lr = 0;
  for (double lr : ref.lrs) steps_lr += lr;
  d.weights = worst_in_steps(got.weights, ref.weights, d_model, steps_lr);
  return d;
}

void expect_reorder_equal(const RunResult& got, const RunResult& ref, int d_model,
                          const std::string& what) {
  const RunDiff d = compare_runs(got, ref, d_model);
  EXPECT_LE(d.first_loss, kReorderFirstLoss) << what << ": step 1 loss";
  EXPECT_LE(d.later_loss, kReorderLoss) << what << ": loss of step " << d.later_loss_step;
  EXPECT_LE(d.grad1.value, kReorderGrad) << what << ": step 1 gradient of " << d.grad1.name;
  EXPECT_LE(d.weights.value, kReorderWeightSteps) << what << ": weights of " << d.weights.name;
  std::printf(
      "%-36s loss: step 1 %.1e, later %.1e | step-1 grad %.1e (%s) | weights %.1e lr (%s)\n",
      what.c_str(), d.first_loss, d.later_loss, d.grad1.value, d.grad1.name.c_str(),
      d.weights.value, d.weights.name.c_str());
}

const RunResult& single_rank_run(const Config& base) {
  static std::map<std::string, RunResult> cache;
  const std::string key = to_yaml(base);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, run_layout(base, MPI_COMM_SELF)).first;
  return it->second;
}

std::optional<RunResult> expect_equals_single_rank(const Config& c, const Config& base,
                                                   const std::string& name) {
  const int size = c.parallel.dp * c.parallel.pp * c.parallel.tp * c.parallel.cp,
            rank = world_rank();
  Config v = c;  // the layout rules (the synthetic samples need no data files)
  v.data.train = {{"synthetic", 1.0}};
  v.model.vocab_size = std::max(v.model.vocab_size, 257);  // the byte tokenizer's minimum
  const std::vector<std::string> problems = validate(v, size);
  if (!problems.empty() || size > world_size()) {
    ADD_FAILURE() << name << ": " << (problems.empty() ? "more ranks than the job" : problems[0]);
    return std::nullopt;
  }
  const RunResult* ref = rank == 0 ? &single_rank_run(base) : nullptr;
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &sub);
  if (rank >= size) return std::nullopt;
  RunResult got = run_layout(c, sub);
  MPI_Comm_free(&sub);
  if (rank != 0) return std::nullopt;
  expect_reorder_equal(got, *ref, c.model.d_model, name);
  return got;
}

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
  return worst;
}

}  // namespace loom::test
