// HF Llama safetensors under MPI (2 ranks): a GQA llama exported from tp2 (and pp2) shards
// loads back bitwise into the same shards, and into one rank as the gathered whole.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <limits>

#include "ckpt/canonical.h"
#include "ckpt/safetensors.h"
#include "tests/ckpt/hf_llama_util.h"
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

}  // namespace
}  // namespace loom
