// Generation on every layout equals the single rank: tp2, pp2, dp2 and tp2 x pp2 (4 ranks) give
// the single rank's logits within the reorder class and the same ids, greedy and sampled, for
// GPT-2 and Llama with grouped-query attention.
#include <gtest/gtest.h>
#include <mpi.h>

#include "tests/generate/generate_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

struct Layout {
  int dp, pp, tp;
};

void expect_layouts_equal_single(const ModelConfig& m, const SampleOptions& s) {
  const int rank = test::world_rank();
  ASSERT_GE(test::world_size(), 4);
  const auto be = make_cpu_backend();
  const auto reqs = test::test_requests(m.vocab_size, 7, s);
  auto self = make_parallel_ctx(Grid(1, 1, 1), MPI_COMM_SELF);
  const test::GenRun ref = test::run_generator(m, *self, *be, reqs, 2, true);
  for (const Layout l : {Layout{1, 1, 2}, Layout{1, 2, 1}, Layout{2, 1, 1}, Layout{1, 2, 2}}) {
    const int n = l.dp * l.pp * l.tp;
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, rank < n ? 0 : MPI_UNDEFINED, rank, &sub);
    if (sub == MPI_COMM_NULL) continue;
    const std::string name = m.arch + " dp" + std::to_string(l.dp) + " pp" + std::to_string(l.pp) +
                             " tp" + std::to_string(l.tp);
    {
      auto pc = make_parallel_ctx(Grid(l.dp, l.pp, l.tp), sub);
      const test::GenRun run = test::run_generator(m, *pc, *be, reqs, 2, true);
      // Every row a last-stage rank sampled from equals the single rank's row.
      int rows = int(run.rows.size());
      for (const auto& [key, row] : run.rows) {
        const auto it = ref.rows.find(key);
        ASSERT_TRUE(it != ref.rows.end()) << name << ": no reference row";
        EXPECT_LE(test::row_error(row, it->second.data(), m.vocab_size), test::kCachedVsFull)
            << name << " sequence " << key.first << " position " << key.second;
      }
      MPI_Allreduce(MPI_IN_PLACE, &rows, 1, MPI_INT, MPI_SUM, sub);
      EXPECT_EQ(rows, int(ref.rows.size()) * l.tp) << name;  // each TP rank of the last stage
      if (pc->rank == 0) {
        ASSERT_EQ(run.result.size(), ref.result.size()) << name;
        for (size_t i = 0; i < ref.result.size(); ++i)
          EXPECT_EQ(run.result[i].out, ref.result[i].out) << name << " sequence " << i;
      } else {
        EXPECT_TRUE(run.result.empty());
      }
    }
    MPI_Comm_free(&sub);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(GenerateLayouts, Gpt2GreedyAndSampled) {
  SampleOptions greedy;
  greedy.temperature = 0.0f;
  expect_layouts_equal_single(test::tiny_gpt2(), greedy);
  // Sampled ids agree too: the draws are a function of (seed, sequence, position) and the
  // logits differ by rounding only (a draw within ~1e-7 of a boundary would be needed to flip).
  SampleOptions s;
  s.temperature = 0.9f, s.top_k = 30, s.top_p = 0.95f, s.seed = 11;
  expect_layouts_equal_single(test::tiny_gpt2(), s);
}

TEST(GenerateLayouts, LlamaGqaGreedyAndSampled) {
  SampleOptions greedy;
  greedy.temperature = 0.0f;
  expect_layouts_equal_single(test::tiny_llama(), greedy);
  SampleOptions s;
  s.temperature = 0.9f, s.top_k = 30, s.top_p = 0.95f, s.seed = 11;
  expect_layouts_equal_single(test::tiny_llama(), s);
}

}  // namespace
}  // namespace loom
