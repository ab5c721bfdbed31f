// The cached decoder on the cuda backend (fp32) against the cpu backend: the same rows of logits
// within the bound of tests/generate (reordered fp32 sums; the cuda kernels' expf and FMA
// contraction are within one rounding per operation, inside the same n*u budget) and the same
// greedy and sampled ids, gpt2 and llama with grouped-query attention; bf16 runs to the end.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_test_util.h"
#include "tests/generate/generate_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

class CudaGenerate : public cudatest::CudaTest {};

TEST_F(CudaGenerate, Fp32LogitsAndIdsEqualCpu) {
  test::ensure_mpi();
  auto pc = make_parallel_ctx(Grid(1, 1, 1), MPI_COMM_SELF);
  const auto cpu = make_cpu_backend();
  const auto gpu = make_cuda_backend(DType::F32, 0);
  SampleOptions greedy, sampled;
  greedy.temperature = 0.0f;
  sampled.temperature = 0.9f, sampled.top_k = 30, sampled.seed = 4;
  for (const ModelConfig& m : {test::tiny_gpt2(), test::tiny_llama()})
    for (const SampleOptions& s : {greedy, sampled}) {
      const auto reqs = test::test_requests(m.vocab_size, 7, s);
      const test::GenRun a = test::run_generator(m, *pc, *cpu, reqs, 2, true);
      const test::GenRun b = test::run_generator(m, *pc, *gpu, reqs, 2, true);
      ASSERT_EQ(a.result.size(), b.result.size());
      for (size_t i = 0; i < a.result.size(); ++i)
        EXPECT_EQ(a.result[i].out, b.result[i].out) << m.arch << " sequence " << i;
      ASSERT_EQ(a.rows.size(), b.rows.size());
      for (const auto& [key, row] : a.rows)
        EXPECT_LE(test::row_error(b.rows.at(key), row.data(), m.vocab_size), test::kCachedVsFull)
            << m.arch << " sequence " << key.first << " position " << key.second;
    }
}

TEST_F(CudaGenerate, Bf16RunsEverySequenceToItsLength) {
  test::ensure_mpi();
  auto pc = make_parallel_ctx(Grid(1, 1, 1), MPI_COMM_SELF);
  const auto gpu = make_cuda_backend(DType::BF16, 0);
  SampleOptions greedy;
  greedy.temperature = 0.0f;
  for (const ModelConfig& m : {test::tiny_gpt2(), test::tiny_llama()}) {
    const test::GenRun b =
        test::run_generator(m, *pc, *gpu, test::test_requests(m.vocab_size, 7, greedy), 2, true);
    ASSERT_EQ(b.result.size(), 4u);
    for (const GenSequence& s : b.result) EXPECT_EQ(s.out.size(), 7u) << m.arch;
  }
}

}  // namespace
}  // namespace loom
