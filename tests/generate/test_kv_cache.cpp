// Decoding with the KV cache equals full recomputation by the training forward: every sampled
// row of logits of a batch of prompts (more prompts than cache slots, so slots are reused), for
// GPT-2 and Llama with grouped-query attention.
#include <gtest/gtest.h>

#include "tests/generate/generate_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

// Greedy generation of 4 prompts with 2 cache slots; each recorded row against the training
// forward's logits at the same position of the finished sequence.
void expect_cache_equals_recompute(const ModelConfig& m) {
  test::ensure_mpi();
  auto pc = make_parallel_ctx(Grid(1, 1, 1), MPI_COMM_SELF);
  const auto be = make_cpu_backend();
  SampleOptions greedy;
  greedy.temperature = 0.0f;
  const auto reqs = test::test_requests(m.vocab_size, 9, greedy);
  const test::GenRun run = test::run_generator(m, *pc, *be, reqs, 2, true);
  ASSERT_EQ(run.result.size(), reqs.size());
  int rows = 0;
  double worst = 0;
  for (const GenSequence& s : run.result) {
    ASSERT_EQ(int(s.out.size()), 9) << "sequence " << s.req.id;
    std::vector<int32_t> ids = s.req.prompt;
    ids.insert(ids.end(), s.out.begin(), s.out.end());
    const std::vector<float> ref = test::full_forward_logits(m, ids);
    for (int pos = int(s.req.prompt.size()) - 1; pos + 1 < int(ids.size()); ++pos) {
      const auto it = run.rows.find({s.req.id, pos});
      ASSERT_TRUE(it != run.rows.end()) << "no row for sequence " << s.req.id << " at " << pos;
      const float* r = ref.data() + size_t(pos) * size_t(m.vocab_size);
      const double e = test::row_error(it->second, r, m.vocab_size);
      worst = std::max(worst, e);
      EXPECT_LE(e, test::kCachedVsFull) << "sequence " << s.req.id << " position " << pos;
      // Greedy: the id taken is the reference row's argmax.
      const int32_t arg = int32_t(std::max_element(r, r + m.vocab_size) - r);
      EXPECT_EQ(ids[size_t(pos) + 1], arg) << "sequence " << s.req.id << " position " << pos;
      ++rows;
    }
  }
  EXPECT_EQ(rows, 4 * 9);
  std::printf("%s: %d rows, worst relative error %.3g (bound %.1g)\n", m.arch.c_str(), rows, worst,
              test::kCachedVsFull);
}

TEST(KvCache, Gpt2CachedLogitsEqualFullRecomputation) {
  expect_cache_equals_recompute(test::tiny_gpt2());
}

TEST(KvCache, LlamaGqaCachedLogitsEqualFullRecomputation) {
  expect_cache_equals_recompute(test::tiny_llama());
}

// The bound is far below what one wrong key does: the reference with the first id of the
// sequence changed (as a cache that lost or mixed up one row would see) is outside it.
TEST(KvCache, BoundSeesOneChangedEarlierId) {
  test::ensure_mpi();
  for (const ModelConfig& m : {test::tiny_gpt2(), test::tiny_llama()}) {
    std::vector<int32_t> ids = {5, 9, 13, 2, 40, 41, 7, 8};
    const std::vector<float> a = test::full_forward_logits(m, ids);
    ids[0] = 6;
    const std::vector<float> b = test::full_forward_logits(m, ids);
    const size_t last = size_t(ids.size() - 1) * size_t(m.vocab_size);
    const std::vector<float> row(b.begin() + long(last), b.begin() + long(last + m.vocab_size));
    EXPECT_GT(test::row_error(row, a.data() + last, m.vocab_size), 10 * test::kCachedVsFull)
        << m.arch;
  }
}

// Without the cache (every step recomputes each prefix through the same decoder) the ids and
// logits are those of the cached run, sampling at temperature 0.8 with top-k and top-p.
TEST(KvCache, NoCacheRunDrawsTheSameIds) {
  test::ensure_mpi();
  auto pc = make_parallel_ctx(Grid(1, 1, 1), MPI_COMM_SELF);
  const auto be = make_cpu_backend();
  SampleOptions s;
  s.temperature = 0.8f, s.top_k = 20, s.top_p = 0.9f, s.seed = 3;
  for (const ModelConfig& m : {test::tiny_gpt2(), test::tiny_llama()}) {
    const auto reqs = test::test_requests(m.vocab_size, 8, s);
    const test::GenRun a = test::run_generator(m, *pc, *be, reqs, 3, true);
    const test::GenRun b = test::run_generator(m, *pc, *be, reqs, 3, false);
    ASSERT_EQ(a.result.size(), b.result.size());
    for (size_t i = 0; i < a.result.size(); ++i)
      EXPECT_EQ(a.result[i].out, b.result[i].out) << m.arch << " sequence " << i;
    ASSERT_EQ(a.rows.size(), b.rows.size());
    for (const auto& [key, row] : a.rows)
      EXPECT_LE(test::row_error(row, b.rows.at(key).data(), m.vocab_size), test::kCachedVsFull);
  }
}

}  // namespace
}  // namespace loom
