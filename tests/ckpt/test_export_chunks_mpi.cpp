// Chunked exports under MPI (4 ranks): gpt2 and llama models held as tp2 x pp2 and dp2 x tp2
// shards, and whole on one rank, exported with chunks of a few bytes to a few KiB (pieces of
// one row, several rows, whole tensors) are bitwise the file write_safetensors makes of the
// same tensors built here directly; HDF5 exports load back to the same values; a file rank 0
// cannot create stops every rank with one error.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "ckpt/canonical.h"
#include "ckpt/checkpoint.h"
#include "ckpt/export_checkpoint.h"
#include "ckpt/hf_llama.h"
#include "ckpt/safetensors.h"
#include "tests/ckpt/hf_llama_util.h"
#include "tests/ckpt/resume_util.h"
#include "tests/parallel/equivalence_util.h"
#include "tests/support/compare.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

ModelConfig tiny_gpt2() {  // 4*C = 128 columns: coded values stay exact
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = 32;
  m.vocab_size = 97;
  m.seq_len = 16;
  m.tie_embeddings = false;
  return m;
}

// id of a canonical tensor: its place in the whole model's layout, from 1.
int tensor_id(const ParamLayout& whole, const std::string& name) {
  for (size_t i = 0; i < whole.params().size(); ++i)
    if (whole.params()[i].name == name) return int(i) + 1;
  ADD_FAILURE() << "no tensor " << name;
  return 0;
}

// This rank's shard with element (r, c) of each canonical tensor set to coded(id, r, c).
std::vector<float> coded_shard(const ParamLayout& L) {
  const ParamLayout whole(L.model(), 1, 0, 1, 0);
  std::vector<float> v(L.total(), 0.0f);
  for (const ParamSpec& p : L.params()) {
    const int id = tensor_id(whole, p.name);
    for (const ShardBlock& b : L.blocks(p))
      for (int64_t i = 0; i < b.rows; ++i)
        for (int64_t j = 0; j < b.cols; ++j)
          v[p.offset + size_t((b.lrow + i) * p.lcols + b.lcol + j)] =
              test::coded(id, b.grow + i, b.gcol + j);
  }
  return v;
}

// The whole canonical tensors, coded, built without any gather.
std::map<std::string, CanonicalTensor> coded_whole(const ModelConfig& m) {
  const ParamLayout whole(m, 1, 0, 1, 0);
  std::map<std::string, CanonicalTensor> out;
  for (const ParamSpec& p : whole.params()) {
    CanonicalTensor& t = out[p.name];
    t.rows = p.rows, t.cols = p.cols, t.ndim = p.ndim;
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t c = 0; c < p.cols; ++c)
        t.data.push_back(test::coded(tensor_id(whole, p.name), r, c));
  }
  return out;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = std::string(LOOM_BINARY_DIR) + "/test_export_chunks_mpi/" + name;
  if (test::world_rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

void set_chunk(const char* bytes) {
  if (bytes)
    setenv("LOOM_GATHER_CHUNK_BYTES", bytes, 1);
  else
    unsetenv("LOOM_GATHER_CHUNK_BYTES");
}

// Chunk sizes: the default (each tensor in one chunk), 1000 bytes (250 values: several rows of
// 32 columns, not a divisor of any tensor) and 12 bytes (3 values: pieces of every row).
const char* const kChunks[] = {nullptr, "1000", "12"};

// Exports the coded model from grid (dp, pp, tp) over `comm` at every chunk size; rank 0 of
// `comm` compares each safetensors file bitwise with write_safetensors of coded_whole, and
// each HDF5 file, loaded whole, with the coded values.
void check_exports(const ModelConfig& m, int dp, int pp, int tp, MPI_Comm comm,
                   const std::string& dir) {
  auto pc = make_parallel_ctx(Grid(dp, pp, tp), comm);
  const ParamLayout L(m, tp, pc->coord.tp, pp, pc->coord.pp);
  const std::vector<float> mine = coded_shard(L);
  const ParamLayout whole(m, 1, 0, 1, 0);
  const std::string ref = dir + "/ref.safetensors";
  if (pc->rank == 0) {
    const auto tensors = coded_whole(m);
    write_safetensors(ref, m.llama() ? llama_to_hf(tensors, m) : tensors, {{"format", "pt"}});
  }
  for (const char* chunk : kChunks) {
    set_chunk(chunk);
    const std::string tag = chunk ? chunk : "default";
    const std::string st = dir + "/chunk_" + tag + ".safetensors",
                      h5 = dir + "/chunk_" + tag + ".h5";
    save_canonical(st, L, mine.data(), *pc);
    save_canonical(h5, L, mine.data(), *pc);
    const auto gathered = gather_canonical(L, mine.data(), *pc);
    if (pc->rank != 0) continue;
    EXPECT_EQ(read_bytes(st), read_bytes(ref)) << st << " differs from " << ref;
    std::vector<float> back(whole.total(), std::numeric_limits<float>::quiet_NaN());
    load_canonical(h5, whole, back.data());
    EXPECT_TRUE(test::bitwise_equal(back, coded_shard(whole))) << h5;
    const auto want = coded_whole(m);
    ASSERT_EQ(gathered.size(), want.size()) << tag;
    for (const auto& [name, t] : want) {
      const CanonicalTensor& g = gathered.at(name);
      EXPECT_TRUE(g.rows == t.rows && g.cols == t.cols && g.ndim == t.ndim &&
                  test::bitwise_equal(g.data, t.data))
          << name << " gathered with chunk " << tag;
    }
  }
  set_chunk(nullptr);
}

struct Case {
  const char* name;
  bool llama;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ExportChunks : public ::testing::TestWithParam<Case> {};

TEST_P(ExportChunks, Tp2Pp2) {
  const ModelConfig m = GetParam().llama ? test::tiny_llama(false) : tiny_gpt2();
  check_exports(m, 1, 2, 2, MPI_COMM_WORLD, fresh_dir(std::string(GetParam().name) + "_tp2pp2"));
}

TEST_P(ExportChunks, Dp2Tp2) {  // only the first replica's blocks are sent
  const ModelConfig m = GetParam().llama ? test::tiny_llama(true) : tiny_gpt2();
  check_exports(m, 2, 1, 2, MPI_COMM_WORLD, fresh_dir(std::string(GetParam().name) + "_dp2tp2"));
}

TEST_P(ExportChunks, OneRank) {
  const ModelConfig m = GetParam().llama ? test::tiny_llama(false) : tiny_gpt2();
  const std::string dir = fresh_dir(std::string(GetParam().name) + "_one");
  MPI_Comm one;
  MPI_Comm_split(MPI_COMM_WORLD, test::world_rank() == 0 ? 0 : MPI_UNDEFINED, 0, &one);
  if (one != MPI_COMM_NULL) {
    check_exports(m, 1, 1, 1, one, dir);
    MPI_Comm_free(&one);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

INSTANTIATE_TEST_SUITE_P(Models, ExportChunks,
                         ::testing::Values(Case{"gpt2", false}, Case{"llama", true}),
                         [](const auto& info) { return std::string(info.param.name); });

// A directory that does not exist: rank 0 cannot create the file, and every rank throws
// (rank 0 its own error, the others one pointing at rank 0) instead of waiting in a gather.
// `loom export` runs on one process and reads the checkpoint one single-layer pipeline stage at
// a time (export_checkpoint) instead of the whole model. Its files are bitwise the ones
// save_canonical writes from the whole model read at once (safetensors compared byte for byte,
// HDF5 loaded back), for gpt2 tied and untied, llama (Hugging Face names: fused tensors split
// and transposed) and a gpt2 Mixture of Experts, at every chunk size. Each checkpoint comes from
// two training steps on one rank.
TEST(ExportCheckpoint, StreamedEqualsTheWholeModel) {
  Config tied = test::tiny_parallel_config();
  tied.model.tie_embeddings = true;
  Config untied = tied;
  untied.model.tie_embeddings = false;
  Config moe = tied;
  moe.model.moe.num_experts = 4;
  moe.model.moe.top_k = 2;
  const std::pair<const char*, Config> cases[] = {{"gpt2_tied", tied},
                                                  {"gpt2_untied", untied},
                                                  {"llama", test::tiny_llama_config(2)},
                                                  {"gpt2_moe", moe}};
  for (auto [name, c] : cases) {
    c.checkpoint.dir = test::fresh_dir("test_export_checkpoint", name);
    c.checkpoint.save_interval = 0;
    test::train_resumable(c, 2, false, 2);
    if (test::world_rank() != 0) continue;
    const std::string dir = resolve_checkpoint_dir(c.checkpoint.dir);
    const ParamLayout whole(c.model, 1, 0, 1, 0);
    std::vector<float> params(whole.total());
    read_checkpoint_tensors(dir, whole, params.data(), nullptr, nullptr);
    auto pc = make_parallel_ctx(Grid(1, 1, 1), MPI_COMM_SELF);
    const std::string out = c.checkpoint.dir + "/export";
    std::filesystem::create_directories(out);
    for (const char* ext : {".safetensors", ".h5"}) {
      set_chunk(nullptr);
      const std::string ref = out + "/whole" + ext;
      save_canonical(ref, whole, params.data(), *pc, &c.model);
      for (const char* chunk : kChunks) {
        set_chunk(chunk);
        const std::string got = out + "/streamed_" + (chunk ? chunk : "default") + ext;
        export_checkpoint(dir, got, c.model);
        if (std::string(ext) == ".safetensors") {
          EXPECT_EQ(read_bytes(got), read_bytes(ref)) << name << ": " << got;
        } else {
          std::vector<float> a(whole.total(), std::numeric_limits<float>::quiet_NaN()), b = a;
          load_canonical(got, whole, a.data());
          load_canonical(ref, whole, b.data());
          EXPECT_TRUE(test::bitwise_equal(a, b)) << name << ": " << got;
        }
      }
    }
    set_chunk(nullptr);
  }
}

TEST(ExportChunksErrors, UnwritablePathStopsEveryRank) {
  const ModelConfig m = tiny_gpt2();
  auto pc = make_parallel_ctx(Grid(1, 2, 2));
  const ParamLayout L(m, 2, pc->coord.tp, 2, pc->coord.pp);
  const std::vector<float> mine = coded_shard(L);
  for (const std::string path : {"/nonexistent_dir/x.safetensors", "/nonexistent_dir/x.h5"}) {
    try {
      save_canonical(path, L, mine.data(), *pc);
      ADD_FAILURE() << "no error for " << path;
    } catch (const UserError& e) {
      const std::string msg = e.what();
      if (pc->rank == 0)
        EXPECT_NE(msg.find("/nonexistent_dir/x"), std::string::npos) << msg;
      else
        EXPECT_NE(msg.find("failed on world rank 0"), std::string::npos) << msg;
    }
  }
  // A bad chunk size is refused on every rank before anything is gathered.
  set_chunk("12k");
  EXPECT_THROW(gather_canonical(L, mine.data(), *pc), UserError);
  set_chunk(nullptr);
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace loom
