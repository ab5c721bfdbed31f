// Sampling arithmetic, eval against the PyTorch fixture's loss, and greedy generation from a
// model trained to memorize a sentence reproducing that sentence.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "model/decode_stage.h"
#include "model/init.h"
#include "tests/support/configs.h"
#include "tests/support/fixture.h"
#include "tests/support/mpi_test_env.h"
#include "train/generate.h"
#include "train/trainer.h"

namespace loom {
namespace {

TEST(Sample, GreedyIsArgmaxWithLowestIdOnTies) {
  float logits[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  SampleOptions opt;
  opt.temperature = 0.0f;
  EXPECT_EQ(sample_token(logits, 5, opt, 0, 0), 1);
  opt.temperature = 1.0f;
  opt.top_k = 1;  // top-1 sampling is greedy too
  for (uint64_t i = 0; i < 20; ++i) EXPECT_EQ(sample_token(logits, 5, opt, 0, i), 1);
}

TEST(Sample, DeterministicPerSeedAndFollowsTheSoftmax) {
  float logits[4] = {0.0f, 1.0f, 2.0f, -1.0f};
  SampleOptions opt;
  opt.temperature = 0.7f;
  opt.seed = 9;
  std::vector<int> a, b;
  for (uint64_t i = 0; i < 50; ++i) a.push_back(sample_token(logits, 4, opt, 0, i));
  for (uint64_t i = 0; i < 50; ++i) b.push_back(sample_token(logits, 4, opt, 0, i));
  EXPECT_EQ(a, b);
  opt.seed = 10;
  std::vector<int> c;
  for (uint64_t i = 0; i < 50; ++i) c.push_back(sample_token(logits, 4, opt, 0, i));
  EXPECT_NE(a, c);
  // Frequencies over 40000 draws against softmax(logits / 0.7): 4-sigma binomial bounds.
  const int n = 40000;
  std::vector<int> count(4, 0);
  for (int i = 0; i < n; ++i) count[size_t(sample_token(logits, 4, opt, 0, uint64_t(i)))]++;
  double z = 0, p[4];
  for (int v = 0; v < 4; ++v) z += p[v] = std::exp(logits[v] / 0.7);
  for (int v = 0; v < 4; ++v) {
    p[v] /= z;
    double sigma = std::sqrt(n * p[v] * (1 - p[v]));
    EXPECT_NEAR(count[size_t(v)], n * p[v], 4 * sigma) << "id " << v;
  }
  // top-k 2 never draws outside the two largest logits.
  opt.top_k = 2;
  for (int i = 0; i < 2000; ++i) {
    int t = sample_token(logits, 4, opt, 0, uint64_t(i));
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
}

// top-p keeps the shortest most-likely prefix whose mass reaches p: with probabilities
// softmax(logits / 0.7) = 0.763, 0.183, 0.044, 0.011 for ids 2, 1, 0, 3, p = 0.6 keeps id 2
// alone and p = 0.9 keeps ids 2 and 1 in their renormalized ratio; sequence and position pick
// independent draws.
TEST(Sample, TopPKeepsTheNucleus) {
  float logits[4] = {0.0f, 1.0f, 2.0f, -1.0f};
  SampleOptions opt;
  opt.temperature = 0.7f;
  opt.top_p = 0.6f;
  for (int i = 0; i < 500; ++i) EXPECT_EQ(sample_token(logits, 4, opt, 1, uint64_t(i)), 2);
  opt.top_p = 0.9f;
  const int n = 20000;
  int twos = 0;
  for (int i = 0; i < n; ++i) {
    const int t = sample_token(logits, 4, opt, uint64_t(i), 5);
    ASSERT_TRUE(t == 1 || t == 2) << t;
    twos += t == 2;
  }
  const double p2 = 1.0 / (1.0 + std::exp(-1.0 / 0.7));  // ids 2 and 1 only
  EXPECT_NEAR(twos, n * p2, 4 * std::sqrt(n * p2 * (1 - p2)));
}

TEST(Sample, BadOptionsAreNamed) {
  SampleOptions o;
  o.temperature = -1;
  EXPECT_NE(sample_options_problem(o).find("temperature -1"), std::string::npos);
  o = SampleOptions{};
  o.top_p = 0;
  EXPECT_NE(sample_options_problem(o).find("top-p 0"), std::string::npos);
  o = SampleOptions{};
  o.top_k = -2;
  EXPECT_NE(sample_options_problem(o).find("top-k -2"), std::string::npos);
  EXPECT_EQ(sample_options_problem(SampleOptions{}), "");
}

// Eval of the PyTorch fixture weights on the fixture's batch reproduces the fixture loss.
TEST(Eval, FixtureLossThroughTheForwardOnlyPipeline) {
  test::ensure_mpi();
  const std::string fx = test::source_path("tests/reference/fixtures/gpt2_tiny_fixture.h5");
  Config c;
  c.model = test::fixture_model();
  c.parallel.dp = c.parallel.pp = c.parallel.tp = 1;
  c.parallel.micro_batch_size = 1;  // 2 micro-batches: the loss is accumulated over both
  c.train.global_batch_size = 2;
  c.train.init_from = test::source_path("tests/reference/fixtures/gpt2_tiny_weights.h5");
  auto inputs = test::read_h5_int(fx, "inputs"), targets = test::read_h5_int(fx, "targets");
  SampleFn batch0 = [&](int64_t first, int rows, int32_t* in, int32_t* tg) {
    for (int r = 0; r < rows; ++r)
      for (int t = 0; t < 8; ++t) {
        size_t i = size_t((first + r) % 2) * 8 + size_t(t);
        in[r * 8 + t] = inputs[i];
        tg[r * 8 + t] = targets[i];
      }
  };
  auto pc = make_parallel_ctx(Grid(1, 1, 1));
  Trainer trainer(c, *pc, batch0, batch0);
  trainer.init_weights();
  ASSERT_TRUE(trainer.has_valid());
  double ref = test::read_h5(fx, "loss")[0];
  EXPECT_NEAR(trainer.evaluate(1), ref, 1e-6 * ref);
  EXPECT_NEAR(trainer.evaluate(3), ref, 1e-6 * ref);  // 3 batches wrap onto the same samples
}

// Train a tiny byte-level model on one sentence until it knows it, then greedy generation from
// its first words must reproduce the rest.
TEST(Generate, GreedyRecallsAMemorizedSentence) {
  test::ensure_mpi();
  const std::string text = "the quick brown fox jumps over the lazy dog. ";
  const int T = 24;
  Config c;
  c.model.n_layer = 2, c.model.n_head = 2, c.model.d_model = 64, c.model.vocab_size = 257;
  c.model.seq_len = T;
  c.parallel.dp = c.parallel.pp = c.parallel.tp = 1;
  c.parallel.micro_batch_size = 8;
  c.train.global_batch_size = 8;
  c.train.steps = 150;
  c.optimizer.lr = 1e-2, c.optimizer.warmup_steps = 10, c.optimizer.weight_decay = 0.0;
  const int L = int(text.size());
  SampleFn samples = [&](int64_t first, int rows, int32_t* in, int32_t* tg) {
    for (int r = 0; r < rows; ++r)  // sample i starts at offset i mod L of the repeated text
      for (int t = 0; t < T; ++t) {
        int64_t o = (first + r) % L + t;
        in[r * T + t] = (unsigned char)text[size_t(o % L)];
        tg[r * T + t] = (unsigned char)text[size_t((o + 1) % L)];
      }
  };
  auto pc = make_parallel_ctx(Grid(1, 1, 1));
  Trainer trainer(c, *pc, samples);
  trainer.init_weights();
  double loss = 0;
  for (int s = 1; s <= c.train.steps; ++s) loss = trainer.train_step(s).loss;
  ASSERT_LT(loss, 0.05) << "the sentence was not memorized";

  const auto be = make_cpu_backend();
  DecodeStage single(c.model, trainer.layout(), *pc, *be, 1, T);
  single.set_params(trainer.stage().params());
  const std::string prompt = "the quick brown";
  GenRequest r;
  r.prompt.assign(prompt.begin(), prompt.end());
  r.sample.temperature = 0.0f;
  r.max_tokens = T - int(prompt.size());
  Generator gen(single, *pc, 257);
  ASSERT_TRUE(gen.add(r));
  while (!gen.idle()) gen.step();
  const std::vector<GenSequence> done = gen.take_finished();
  ASSERT_EQ(done.size(), 1u);
  std::string out = prompt + std::string(done[0].out.begin(), done[0].out.end());
  // The context (T = 24 ids) holds the sentence's first 24 characters.
  EXPECT_EQ(out, text.substr(0, size_t(T)));

  // Blocked ids (as for ids the tokenizer cannot decode) are never drawn: the memorized next
  // characters 'f' and 'o' give way to others, greedy and sampled alike; logprobs stay <= 0.
  for (float temperature : {0.0f, 1.0f}) {
    Generator blocked(single, *pc, 257);
    blocked.block_ids({'f', 'o'});
    blocked.logprobs = true;
    r.sample.temperature = temperature;
    ASSERT_TRUE(blocked.add(r));
    while (!blocked.idle()) blocked.step();
    const GenSequence s = blocked.take_finished().at(0);
    ASSERT_EQ(s.out.size(), size_t(r.max_tokens));
    if (temperature == 0.0f) {
      EXPECT_EQ(s.out[0], ' ');  // unblocked: still the memorized id
    }
    for (int32_t id : s.out) EXPECT_TRUE(id != 'f' && id != 'o') << temperature;
    for (float lp : s.logprobs) EXPECT_LE(lp, 0.0f);
  }
  Generator g(single, *pc, 257);
  EXPECT_THROW(g.block_ids({257}), std::exception);  // outside the sampled ids
}

}  // namespace
}  // namespace loom
