// Asynchronous checkpoints (checkpoint.async) on 4 ranks, dp2 x pp2 with ZeRO-1, dp2 x tp2 with
// ZeRO-3 and a Mixture of Experts on dp2 x tp2 with ep2: the saves hold bitwise the datasets and
// index of synchronous saves of the same steps, training is bitwise unaffected by a save in flight,
// a save is committed only later (the next save, a step boundary of run(), the end), and resuming
// from either continues bitwise the uninterrupted run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/hdf5_util.h"
#include "tests/ckpt/resume_util.h"
#include "tests/parallel/equivalence_util.h"
#include "tests/support/mpi_test_env.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace loom {
namespace {

// ep > 0: the tiny Llama with 4 experts (top-2), split over ep data-parallel ranks.
Config layout_config(int dp, int pp, int tp, int zero, const std::string& dir, bool async,
                     int ep = 0) {
  Config c = ep > 0 ? test::tiny_llama_config() : test::tiny_parallel_config();
  if (ep > 0) {
    c.model.moe.num_experts = 4;
    c.model.moe.top_k = 2;
    c.model.moe.capacity_factor = 1.25;
    c.parallel.ep = ep;
  }
  c.parallel.dp = dp, c.parallel.pp = pp, c.parallel.tp = tp;
  c.parallel.micro_batch_size = 1;
  c.optimizer.zero_stage = zero;
  c.train.steps = 12;
  c.checkpoint.dir = dir;
  c.checkpoint.async = async;
  return c;
}

bool exists_on_rank0(const std::string& path) {  // the same answer on every rank
  int e = test::world_rank() == 0 && fs::exists(path) ? 1 : 0;
  MPI_Bcast(&e, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return e == 1;
}

struct Run {
  std::vector<double> losses;
  std::map<std::string, CanonicalTensor> weights;
};

// Steps start+1..until (resuming from c.checkpoint.dir when `resume`), saving after each step in
// `saves`. With async, checks that each save stays uncommitted until the next save or
// finish_checkpoint().
Run train(Config c, int until, bool resume, const std::vector<int>& saves) {
  c.checkpoint.resume = resume ? "auto" : "none";
  const ParallelConfig& p = c.parallel;
  auto pc = make_parallel_ctx(Grid(p.dp, p.pp, p.tp));
  Trainer t(c, *pc, test::synthetic_samples(c.model.vocab_size, c.model.seq_len));
  t.init_weights();
  t.resume();
  Run out;
  int pending = 0;  // the asynchronous save in flight
  const std::string dir = c.checkpoint.dir + "/";
  for (int s = t.start_step() + 1; s <= until; ++s) {
    out.losses.push_back(t.train_step(s).loss);
    if (std::find(saves.begin(), saves.end(), s) == saves.end()) continue;
    t.save(s);
    const std::string step = checkpoint_step_name(s);
    if (!c.checkpoint.async) continue;
    EXPECT_FALSE(exists_on_rank0(dir + step)) << "committed at its save point";
    EXPECT_TRUE(exists_on_rank0(dir + step + ".tmp")) << "not staged";
    if (pending) {  // a second save commits the first one before it starts
      EXPECT_TRUE(exists_on_rank0(dir + checkpoint_step_name(pending)));
    }
    pending = s;
  }
  t.finish_checkpoint();
  if (pending) {
    EXPECT_TRUE(exists_on_rank0(dir + checkpoint_step_name(pending)));
  }
  out.weights = gather_canonical(t.layout(), t.full_params().data(), *pc);
  return out;
}

json read_meta(const std::string& dir) {
  std::ifstream in(dir + "/meta.json");
  return json::parse(in);
}

// Rank 0: the two step directories describe the same state (step, data position, trainer
// state, layout, block index, file sizes) and every dataset is bitwise the same.
void expect_same_checkpoint(const std::string& a, const std::string& b) {
  if (test::world_rank() != 0) return;
  const json ma = read_meta(a), mb = read_meta(b);
  for (const char* key :
       {"format", "step", "consumed_samples", "trainer_state", "seed", "model", "layout", "blocks"})
    EXPECT_EQ(ma[key], mb[key]) << key << " of " << a << " and " << b;
  ASSERT_EQ(ma["files"].size(), mb["files"].size());
  for (size_t i = 0; i < ma["files"].size(); ++i) {
    EXPECT_EQ(ma["files"][i]["file"], mb["files"][i]["file"]);
    EXPECT_EQ(ma["files"][i]["bytes"], mb["files"][i]["bytes"]);
  }
  std::map<std::string, h5::Handle> files;
  auto open = [&](const std::string& path) {
    auto it = files.find(path);
    if (it == files.end()) it = files.emplace(path, h5::open_read(path, "shard")).first;
    return it->second.get();
  };
  size_t datasets = 0;
  for (const json& bl : ma["blocks"]) {
    const std::string fa = a + "/" + bl["file"].get<std::string>();
    const std::string fb = b + "/" + bl["file"].get<std::string>();
    for (int kind = 0; kind < 3; ++kind) {
      const std::string name =
          checkpoint_block_path(kind, bl["tensor"].get<std::string>(), bl["k"].get<size_t>());
      const std::vector<hsize_t> sa = h5::dataset_shape(open(fa), name, fa);
      ASSERT_EQ(sa, h5::dataset_shape(open(fb), name, fb)) << name;
      std::vector<float> da(size_t(sa[0] * sa[1])), db(da.size());
      h5::read_block_f32(open(fa), name, 0, 0, sa[0], sa[1], da.data(), sa[1], fa);
      h5::read_block_f32(open(fb), name, 0, 0, sa[0], sa[1], db.data(), sa[1], fb);
      EXPECT_EQ(std::memcmp(da.data(), db.data(), da.size() * sizeof(float)), 0)
          << name << " in " << bl["file"];
      ++datasets;
    }
  }
  EXPECT_EQ(datasets, 3 * ma["blocks"].size());
  EXPECT_GT(datasets, 0u);
}

void expect_bitwise(const Run& a, const Run& b, const std::string& what) {
  EXPECT_EQ(a.losses, b.losses) << what;
  if (test::world_rank() != 0) return;  // weights are gathered to rank 0
  ASSERT_EQ(a.weights.size(), b.weights.size()) << what;
  for (const auto& [name, t] : a.weights)
    EXPECT_TRUE(t.data == b.weights.at(name).data) << what << ": " << name;
}

void async_equals_sync(int dp, int pp, int tp, int zero, const std::string& name, int ep = 0) {
  const std::string sd = test::fresh_dir("test_async_checkpoint", name + "_sync");
  const std::string ad = test::fresh_dir("test_async_checkpoint", name + "_async");
  const Config sc = layout_config(dp, pp, tp, zero, sd, false, ep);
  const Config ac = layout_config(dp, pp, tp, zero, ad, true, ep);
  const Run straight = train(sc, 12, false, {});
  const Run sync = train(sc, 12, false, {4, 8});
  const Run async = train(ac, 12, false, {4, 8});
  expect_bitwise(sync, straight, "sync saves change training");
  expect_bitwise(async, straight, "async saves change training");
  for (int s : {4, 8})
    expect_same_checkpoint(sd + "/" + checkpoint_step_name(s), ad + "/" + checkpoint_step_name(s));
  // Resume (auto: step 8) from each and run steps 9-12: bitwise the uninterrupted steps.
  const Run from_sync = train(sc, 12, true, {});
  const Run from_async = train(ac, 12, true, {});
  Run tail = straight;
  tail.losses.erase(tail.losses.begin(), tail.losses.begin() + 8);
  expect_bitwise(from_sync, tail, "resumed from the sync checkpoint");
  expect_bitwise(from_async, tail, "resumed from the async checkpoint");
}

TEST(AsyncCheckpoint, EqualsSyncDp2Pp2Zero1) { async_equals_sync(2, 2, 1, 1, "dp2pp2"); }
TEST(AsyncCheckpoint, EqualsSyncDp2Tp2Zero3) { async_equals_sync(2, 1, 2, 3, "dp2tp2z3"); }
// Expert parallelism: dp1 writes its experts into a shard of its own (shard_pp0_tpT_ep1.h5).
TEST(AsyncCheckpoint, EqualsSyncMoeDp2Tp2Ep2) { async_equals_sync(2, 1, 2, 0, "moe_ep2", 2); }
TEST(AsyncCheckpoint, EqualsSyncMoeDp4Ep2Zero2) { async_equals_sync(4, 1, 1, 2, "moe_ep2_z2", 2); }

// Trainer::run(): periodic saves are committed at later step boundaries or at the end; the
// result equals the synchronous run's and keep_last prunes committed saves only.
TEST(AsyncCheckpoint, RunLoopCommitsEverySave) {
  std::string dirs[2];
  for (int async = 0; async < 2; ++async) {
    const std::string name = async ? "run_async" : "run_sync";
    Config c = layout_config(2, 2, 1, 1, test::fresh_dir("test_async_checkpoint", name), async);
    c.train.steps = 7;
    c.train.log_interval = 100;
    c.checkpoint.save_interval = 3;
    c.checkpoint.keep_last = 2;
    c.run.dir = c.checkpoint.dir + "/run";
    auto pc = make_parallel_ctx(Grid(2, 2, 1));
    Trainer t(c, *pc, test::synthetic_samples(c.model.vocab_size, c.model.seq_len));
    t.init_weights();
    t.resume();
    t.run();  // saves after steps 3, 6 and the final step 7
    dirs[async] = c.checkpoint.dir;
  }
  for (const std::string& d : dirs) {
    EXPECT_FALSE(exists_on_rank0(d + "/step_0000003")) << "not pruned (keep_last 2)";
    for (const char* s : {"step_0000006", "step_0000007"})
      EXPECT_TRUE(exists_on_rank0(d + "/" + s)) << d << "/" << s;
    for (const char* s : {"step_0000003.tmp", "step_0000006.tmp", "step_0000007.tmp"})
      EXPECT_FALSE(exists_on_rank0(d + "/" + s)) << d << "/" << s;
    if (test::world_rank() == 0) {
      std::ifstream in(d + "/latest");
      std::string latest;
      in >> latest;
      EXPECT_EQ(latest, "step_0000007") << d;
    }
  }
  for (const char* s : {"step_0000006", "step_0000007"})
    expect_same_checkpoint(dirs[0] + "/" + s, dirs[1] + "/" + s);
}

}  // namespace
}  // namespace loom
