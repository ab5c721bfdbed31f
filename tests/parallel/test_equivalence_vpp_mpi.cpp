// Interleaved 1F1B (parallel.virtual_stages): every layout with v chunks per pipeline stage
// trains like the single rank, within the reorder tolerance class (tests/support/tolerance.h),
// for gpt2 and llama, with ZeRO 1-3, recompute, overlap and the tied embedding crossing the
// pipeline. Runs under mpirun -np 8; smaller layouts use the first dp*pp*tp ranks.
#include <gtest/gtest.h>

#include "tests/parallel/equivalence_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

Config gpt2_config(int n_layer, bool tied = false) {
  Config c = test::tiny_parallel_config();
  c.model.n_layer = n_layer;
  c.model.tie_embeddings = tied;
  return c;
}

// As tests/parallel/test_equivalence_llama_mpi.cpp: 8 query heads over 4 kv heads of size 4,
// SwiGLU width 48, RoPE base 100.
Config llama_config(int n_layer) {
  Config c = gpt2_config(n_layer);
  c.model.arch = "llama";
  c.model.n_head = 8;
  c.model.n_kv_head = 4;
  c.model.ffn_hidden = 48;
  c.model.rope_theta = 100.0;
  c.model.norm_eps = 1e-5;
  return c;
}

struct Layout {
  int dp, pp, tp, v, micro;
  int zero = 0;
  const char* recompute = "none";
  bool overlap = false;
  bool sp = false;  // parallel.sequence_parallel
};

void check_layout(const Layout& l, const Config& base, const std::string& what) {
  Config c = base;
  c.parallel.dp = l.dp, c.parallel.pp = l.pp, c.parallel.tp = l.tp;
  c.parallel.virtual_stages = l.v;
  c.parallel.micro_batch_size = l.micro;
  c.parallel.overlap = l.overlap;
  c.parallel.sequence_parallel = l.sp;
  c.optimizer.zero_stage = l.zero;
  c.train.recompute = l.recompute;
  const std::string name = what + " dp" + std::to_string(l.dp) + "xpp" + std::to_string(l.pp) +
                           "(v" + std::to_string(l.v) + ")xtp" + std::to_string(l.tp) + " micro" +
                           std::to_string(l.micro) + " zero" + std::to_string(l.zero) +
                           " recompute " + l.recompute + (l.overlap ? " overlap" : "") +
                           (l.sp ? " sp" : "");
  test::expect_equals_single_rank(c, base, name);
}

TEST(VppEquivalence, Gpt2TwoStagesTwoChunks) {
  check_layout({1, 2, 1, 2, 1}, gpt2_config(4), "gpt2");  // 8 micro-batches, one layer a chunk
  check_layout({1, 2, 1, 2, 2}, gpt2_config(4), "gpt2");  // 4 micro-batches
  check_layout({1, 2, 1, 2, 2, 0, "none", true}, gpt2_config(4), "gpt2");
  check_layout({1, 2, 1, 2, 1}, gpt2_config(4, true), "gpt2 tied");  // the tie crosses stages
}

TEST(VppEquivalence, Gpt2FourStagesAndFourChunks) {
  check_layout({1, 4, 1, 2, 1}, gpt2_config(8), "gpt2");
  check_layout({1, 4, 1, 2, 2}, gpt2_config(8), "gpt2");  // m == pp: all warm-up
  check_layout({1, 2, 1, 4, 1}, gpt2_config(8), "gpt2");
  check_layout({1, 2, 1, 4, 2, 0, "full", true}, gpt2_config(8), "gpt2");
}

TEST(VppEquivalence, Gpt2ThreeDimensionalWithZeroAndRecompute) {
  for (int zero = 1; zero <= 3; ++zero) check_layout({2, 2, 2, 2, 1, zero}, gpt2_config(4), "gpt2");
  // Overlap: ZeRO 0/1 start each layer's all-reduce after its chunk's last micro-batch.
  check_layout({2, 2, 2, 2, 1, 0, "none", true}, gpt2_config(4), "gpt2");
  check_layout({2, 2, 2, 2, 1, 1, "none", true}, gpt2_config(4), "gpt2");
  check_layout({2, 2, 2, 2, 1, 3, "none", true}, gpt2_config(4), "gpt2");
  check_layout({2, 2, 2, 2, 1, 2, "selective", true}, gpt2_config(4), "gpt2");
  check_layout({2, 2, 2, 2, 1, 1, "full"}, gpt2_config(4, true), "gpt2 tied");
}

TEST(VppEquivalence, Llama) {
  check_layout({1, 2, 1, 2, 1}, llama_config(4), "llama");
  check_layout({1, 4, 1, 2, 1}, llama_config(8), "llama");
  check_layout({1, 2, 1, 4, 1, 0, "selective"}, llama_config(8), "llama");
  check_layout({2, 2, 2, 2, 1, 3, "full", true}, llama_config(4), "llama");
  check_layout({2, 2, 2, 2, 1, 2}, llama_config(4), "llama");
}

// Interleaving with sequence parallelism: (N/tp, C) boundaries between every pair of chunks,
// across the wrap from the last stage to the first too.
TEST(VppEquivalence, WithSequenceParallel) {
  for (int zero = 1; zero <= 3; ++zero)
    check_layout({2, 2, 2, 2, 1, zero, "none", false, true}, gpt2_config(4), "gpt2");
  check_layout({2, 2, 2, 2, 1, 1, "selective", false, true}, llama_config(4), "llama");
  check_layout({2, 2, 2, 2, 1, 2, "full", false, true}, llama_config(4), "llama");
  check_layout({1, 2, 4, 2, 1, 0, "none", false, true}, llama_config(4), "llama");
}

// Evaluation (forward only, every micro-batch through every chunk in order) of the initial
// weights equals the single rank's loss within the reorder class's step-1 loss bound (same
// weights, forward only: kReorderFirstLoss).
double eval_loss(const Config& c, MPI_Comm comm) {
  auto pc = make_parallel_ctx(Grid(c.parallel.dp, c.parallel.pp, c.parallel.tp), comm);
  const SampleFn samples = test::synthetic_samples(c.model.vocab_size, c.model.seq_len);
  Trainer t(c, *pc, samples, samples);
  t.init_weights();
  return t.evaluate(2);
}

TEST(VppEquivalence, EvaluationThroughChunks) {
  struct Case {
    int pp, v, n_layer;
  };
  for (const Case& k : {Case{2, 2, 4}, Case{4, 2, 8}, Case{2, 4, 8}}) {
    Config c = gpt2_config(k.n_layer);
    c.parallel.micro_batch_size = 1;
    const int rank = test::world_rank();
    const double ref = rank == 0 ? eval_loss(c, MPI_COMM_SELF) : 0.0;
    c.parallel.pp = k.pp, c.parallel.virtual_stages = k.v;
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, rank < k.pp ? 0 : MPI_UNDEFINED, rank, &sub);
    if (rank >= k.pp) continue;
    const double got = eval_loss(c, sub);
    MPI_Comm_free(&sub);
    if (rank == 0) {
      EXPECT_NEAR(got, ref, test::kReorderFirstLoss * ref) << "pp" << k.pp << " v" << k.v;
    }
  }
}

}  // namespace
}  // namespace loom
