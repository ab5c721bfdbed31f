// HF Llama safetensors under MPI (2 ranks): a GQA llama exported from tp2 (and pp2) shards
// loads back bitwise into the same shards, and into one rank as the gathered whole; a tp2
// Trainer with train.init_from on an export starts from those weights and trains identically.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <limits>

#include "ckpt/canonical.h"
#include "ckpt/safetensors.h"
#include "tests/ckpt/hf_llama_util.h"
#include "tests/parallel/equivalence_util.h"
#include "tests/support/compare.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

// Element (r, c) of the id-th canonical tensor of the whole model, coded as in hf_llama_util.h;
// vocab padding rows stay zero.
std::vector<float> coded_shard(const ParamLayout& L) {
  const ParamLayout whole(L.model(), 1, 0, 1, 0);
  std::vector<float> v(L.total(), 0.0f);
  for (const ParamSpec& p : L.params()) {
    int id = 1;
    while (whole.params()[size_t(id - 1)].name != p.name) ++id;
    for (const ShardBlock& b : L.blocks(p))
      for (int64_t i = 0; i < b.rows; ++i)
        for (int64_t j = 0; j < b.cols; ++j)
          v[p.offset + size_t((b.lrow + i) * p.lcols + b.lcol + j)] =
              test::coded(id, b.grow + i, b.gcol + j);
  }
  return v;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = std::string(LOOM_BINARY_DIR) + "/test_hf_llama_mpi/" + name;
  if (test::world_rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

// Saves the coded shards of a (tp, pp) layout over the 2 ranks, then loads the file back on
// the same layout (bitwise the same shard) and as one whole rank (bitwise the coded whole).
void round_trip(int tp, int pp, bool tied) {
  ASSERT_EQ(test::world_size(), tp * pp);
  const int rank = test::world_rank();
  const ModelConfig m = test::tiny_llama(tied);
  const std::string dir = fresh_dir(str("tp", tp, "_pp", pp, tied ? "_tied" : "_untied"));
  const std::string path = dir + "/model.safetensors";
  auto pc = make_parallel_ctx(Grid(1, pp, tp));
  const ParamLayout L(m, tp, pc->coord.tp, pp, pc->coord.pp);
  const std::vector<float> mine = coded_shard(L);
  save_canonical(path, L, mine.data(), *pc, &m);
  MPI_Barrier(MPI_COMM_WORLD);

  std::vector<float> back(L.total(), std::numeric_limits<float>::quiet_NaN());
  load_canonical(path, L, back.data());
  EXPECT_TRUE(test::bitwise_equal(back, mine)) << "rank " << rank;

  const ParamLayout whole(m, 1, 0, 1, 0);
  std::vector<float> all(whole.total(), std::numeric_limits<float>::quiet_NaN());
  load_canonical(path, whole, all.data());
  EXPECT_TRUE(test::bitwise_equal(all, coded_shard(whole))) << "rank " << rank;
  if (rank == 0) {
    SafetensorsFile f(path);
    EXPECT_EQ(f.tensors().size(), test::hf_llama_shapes(m).size());
    EXPECT_EQ(f.find("lm_head.weight") != nullptr, !tied);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(HfLlamaMpi, Tp2ExportImportIsBitwiseUntied) { round_trip(2, 1, false); }
TEST(HfLlamaMpi, Tp2ExportImportIsBitwiseTied) { round_trip(2, 1, true); }
TEST(HfLlamaMpi, Pp2ExportImportIsBitwiseTied) { round_trip(1, 2, true); }

// Run A (seed 11) exports its initial weights as a directory and trains 3 steps; run B (seed
// 999, whose own random init differs) starts from the export: same weights, same losses, bitwise.
TEST(HfLlamaMpi, Tp2TrainerInitFromAnExportTrainsIdentically) {
  Config c = test::tiny_parallel_config();
  c.model.arch = "llama";
  c.model.n_kv_head = 2;
  c.model.ffn_hidden = 48;
  c.model.rope_theta = 100.0;
  c.model.tie_embeddings = false;
  c.parallel.tp = 2;
  c.train.steps = 3;
  const std::string dir = fresh_dir("trainer");
  auto pc = make_parallel_ctx(Grid(1, 1, 2));
  const SampleFn samples = test::synthetic_samples(c.model.vocab_size, c.model.seq_len);
  std::vector<float> w_a, w_b, w_seed;
  std::vector<double> loss_a, loss_b;
  {
    Trainer t(c, *pc, samples);
    t.init_weights();
    w_a = t.full_params();
    save_canonical(dir + "/model.safetensors", t.layout(), w_a.data(), *pc, &c.model);
    for (int s = 1; s <= 3; ++s) loss_a.push_back(t.train_step(s).loss);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  c.train.seed = 999;
  {
    Trainer t(c, *pc, samples);
    t.init_weights();
    w_seed = t.full_params();
  }
  c.train.init_from = dir;
  {
    Trainer t(c, *pc, samples);
    t.init_weights();
    w_b = t.full_params();
    for (int s = 1; s <= 3; ++s) loss_b.push_back(t.train_step(s).loss);
  }
  EXPECT_FALSE(test::bitwise_equal(w_seed, w_a));  // the seed alone would not reproduce A
  EXPECT_TRUE(test::bitwise_equal(w_b, w_a));
  EXPECT_EQ(loss_b, loss_a);
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace loom
