// Checkpoint saves: staging to host memory (gather moments to replica 0), one HDF5 shard per
// (pp, tp), and the atomic commit (tmp directory, fsync, rename, latest, prune).
#include "ckpt/checkpoint_save.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "ckpt/file_util.h"
#include "ckpt/hdf5_util.h"
#include "core/check.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/collective.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace loom {

namespace {

json model_json(const ModelConfig& m) {
  return {{"arch", m.arch},
          {"n_layer", m.n_layer},
          {"n_head", m.n_head},
          {"kv_heads", m.kv_heads()},
          {"d_model", m.d_model},
          {"ffn", m.ffn()},
          {"vocab_size", m.vocab_size},
          {"positions", m.positions()},
          {"rope_theta", m.rope_theta},
          {"norm_eps", m.norm_eps},
          {"tie_embeddings", m.tie_embeddings},
          {"num_experts", m.moe.num_experts},
          {"top_k", m.moe.top_k}};
}

// Gathers a ZeRO-sharded buffer (moments; ZeRO-3 parameters) into `all`, the whole flat
// buffer, on the ranks that write it: replica 0, and with expert parallelism the other ranks of
// the first expert replica for their experts. Other ranks get an empty one.
void gather_moment(const float* state, ZeroOptimizer& opt, size_t total, ParallelCtx& pc,
                   HostFloats& all) {
  const bool writes = pc.expert_replica_index() == 0;
  LOOM_CHECK(opt.stage() == 0 || opt.receives_state(false) == writes,
             "the ZeRO groups' first ranks are not the checkpoint's writers");
  size_staging_buffer(all, writes ? opt.state_gather_elems() : 0);
  opt.gather_state(state, writes ? all.data() : nullptr, false);
  all.resize(writes ? total : 0);
}

// Every rank's JSON text, concatenated on world rank 0 (others get an empty list).
std::vector<json> gather_json(const json& mine, ParallelCtx& pc) {
  std::string text = mine.dump();
  int n = int(text.size());
  std::vector<int> sizes(static_cast<size_t>(pc.world.size())), displs(sizes.size());
  LOOM_MPI(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, pc.world.mpi()));
  std::string all;
  if (pc.rank == 0) {
    int total = 0;
    for (size_t i = 0; i < sizes.size(); ++i) displs[i] = total, total += sizes[i];
    all.resize(size_t(total));
  }
  LOOM_MPI(MPI_Gatherv(text.data(), n, MPI_CHAR, all.data(), sizes.data(), displs.data(), MPI_CHAR,
                       0, pc.world.mpi()));
  std::vector<json> out;
  if (pc.rank == 0)
    for (size_t i = 0; i < sizes.size(); ++i)
      out.push_back(json::parse(all.substr(size_t(displs[i]), size_t(sizes[i]))));
  return out;
}

// Writes this (pp, tp) rank's tensor blocks (only the experts' with experts_only: a rank of the
// first expert replica other than dp0); returns its index entries and file record.
// kill_mid_write: SIGKILL this process once half of the stored tensors are in the file.
json write_shard(const std::string& file, const ParamLayout& layout, const float* params,
                 const float* m, const float* v, bool experts_only, bool kill_mid_write) {
  json blocks = json::array();
  auto stored = [&](const ParamSpec& p) {  // replicas and the tied copy: stored once, elsewhere
    return p.norm_owner && (!experts_only || p.expert);
  };
  size_t owned = 0, written = 0;
  for (const ParamSpec& p : layout.params()) owned += stored(p) ? 1 : 0;
  {
    h5::Handle f = h5::create(file);
    std::vector<float> tmp;
    for (const ParamSpec& p : layout.params()) {
      if (!stored(p)) continue;
      if (kill_mid_write && written++ == owned / 2) {
        std::fprintf(stderr, "fault injection: SIGKILL in the checkpoint writer thread, %s\n",
                     file.c_str());
        std::raise(SIGKILL);
      }
      std::vector<ShardBlock> bl = layout.blocks(p);
      for (size_t k = 0; k < bl.size(); ++k) {
        const ShardBlock& b = bl[k];
        const float* src[3] = {params + p.offset, m + p.offset, v + p.offset};
        for (int kind = 0; kind < 3; ++kind) {
          tmp.resize(size_t(b.rows * b.cols));
          for (int64_t r = 0; r < b.rows; ++r)
            std::copy_n(src[kind] + (b.lrow + r) * p.lcols + b.lcol, b.cols,
                        &tmp[size_t(r * b.cols)]);
          h5::write_f32_2d(f.get(), checkpoint_block_path(kind, p.name, k), hsize_t(b.rows),
                           hsize_t(b.cols), tmp.data(), file);
        }
        blocks.push_back({{"tensor", p.name},
                          {"k", k},
                          {"grow", b.grow},
                          {"gcol", b.gcol},
                          {"rows", b.rows},
                          {"cols", b.cols},
                          {"tensor_rows", p.rows},
                          {"tensor_cols", p.cols}});
      }
    }
  }
  fsync_path(file);
  uint64_t bytes = 0;
  uint32_t crc = file_crc32(file, &bytes);
  return {{"file", fs::path(file).filename().string()},
          {"bytes", bytes},
          {"crc32", crc},
          {"blocks", blocks}};
}

}  // namespace

void size_staging_buffer(HostFloats& b, size_t n) {
  if (n == 0) {
    HostFloats().swap(b);
    return;
  }
  const bool fresh = n > b.capacity();
  if (fresh) HostFloats().swap(b);  // no copy of the old contents
  b.resize(n);
  if (!fresh) return;
  // The whole 2 MiB pages inside the new allocation; advice only, so failure is harmless.
  const uintptr_t huge = uintptr_t(2) << 20, lo = reinterpret_cast<uintptr_t>(b.data());
  const uintptr_t first = (lo + huge - 1) / huge * huge, end = lo + n * sizeof(float);
  if (end > first + huge)
    madvise(reinterpret_cast<void*>(first), (end - first) / huge * huge, MADV_HUGEPAGE);
}

StagedCheckpoint stage_checkpoint(const Config& cfg, int step, int64_t consumed_samples,
                                  const ParamLayout& layout, GPTStage& model, ZeroOptimizer& opt,
                                  ParallelCtx& pc, const TrainerState& state, bool async,
                                  StagingBuffers reuse) {
  Stopwatch sw;
  StagedCheckpoint s;
  s.buf = std::move(reuse);
  s.keep_buffers = async;
  s.step = step;
  s.consumed_samples = consumed_samples;
  s.state = state;
  s.zero_stage = opt.stage();
  s.layout = &layout;
  s.root = cfg.checkpoint_dir();
  s.final_dir = (fs::path(s.root) / checkpoint_step_name(step)).string();
  s.tmp_dir = s.final_dir + ".tmp";
  collectively(
      [&] {
        if (pc.rank != 0) return;
        fs::create_directories(s.root);
        fs::remove_all(s.tmp_dir);
        fs::create_directory(s.tmp_dir);
      },
      pc.world.mpi());

  const size_t total = layout.total();
  // One replica (dp0, cp0) of each (pp, tp) writes; with expert parallelism the other ranks of
  // the first expert replica (dp < ep) write their experts.
  s.writes = pc.expert_replica_index() == 0;
  s.experts_only = pc.replica_index() != 0;
  gather_moment(opt.m(), opt, total, pc, s.buf.m);
  gather_moment(opt.v(), opt, total, pc, s.buf.v);
  if (opt.stage() == 3) {  // ZeRO-3 keeps parameters sharded too: gather them the same way
    gather_moment(opt.param_shard(), opt, total, pc, s.buf.params);
  } else {
    size_staging_buffer(s.buf.params, s.writes ? total : 0);
    if (s.writes)
      model.backend().to_host(s.buf.params.data(), model.params(), total * sizeof(float));
  }
  s.file = (fs::path(s.tmp_dir) / str("shard_pp", pc.coord.pp, "_tp", pc.coord.tp,
                                      s.experts_only ? str("_ep", pc.ep_rank()) : "", ".h5"))
               .string();
  // Fault injection for the asynchronous-save test: LOOM_FAULT_KILL_IN_ASYNC_WRITE=STEP makes
  // the writing rank of the highest world rank die inside its writer thread, mid-shard.
  const char* f = std::getenv("LOOM_FAULT_KILL_IN_ASYNC_WRITE");
  if (async && f && std::atoi(f) == step) {
    double last = s.writes ? pc.rank : -1;
    pc.world.all_reduce(&last, 1, ReduceOp::Max);
    s.kill_mid_write = int(last) == pc.rank;
  }
  if (const char* d = std::getenv("LOOM_TEST_ASYNC_WRITE_DELAY_MS"))
    if (async) s.delay_ms = std::max(0, std::atoi(d));
  s.stage_s = sw.ms() / 1e3;
  return s;
}

void write_staged(StagedCheckpoint& s) {
  if (!s.writes) return;
  if (s.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(s.delay_ms));
  Stopwatch sw;
  std::lock_guard<std::recursive_mutex> hold(h5::serial());
  json rec = write_shard(s.file, *s.layout, s.buf.params.data(), s.buf.m.data(), s.buf.v.data(),
                         s.experts_only, s.kill_mid_write);
  rec["seconds"] = sw.ms() / 1e3;  // for the log line; meta.json takes file, bytes, crc32
  s.record = rec.dump();
  if (!s.keep_buffers) s.buf = StagingBuffers();  // the copies are in the file: release them
}

std::string commit_checkpoint(const Config& cfg, const StagedCheckpoint& s, ParallelCtx& pc,
                              bool async) {
  Stopwatch sw;
  // Fault injection for the checkpoint tests: LOOM_FAULT_KILL_IN_SAVE=STEP makes the last rank
  // die by SIGKILL after the shards are written and before the checkpoint is committed.
  if (const char* f = std::getenv("LOOM_FAULT_KILL_IN_SAVE"))
    if (std::atoi(f) == s.step && pc.rank == pc.world.size() - 1) std::raise(SIGKILL);
  std::vector<json> shards =
      gather_json(s.record.empty() ? json::object() : json::parse(s.record), pc);
  const fs::path root = s.root, tmp_dir = s.tmp_dir, final_dir = s.final_dir;
  collectively(
      [&] {
        if (pc.rank != 0) return;
        json files = json::array(), blocks = json::array();
        for (json& sh : shards) {
          if (sh.empty()) continue;
          for (json& b : sh["blocks"]) {
            b["file"] = sh["file"];
            blocks.push_back(b);
          }
          files.push_back({{"file", sh["file"]}, {"bytes", sh["bytes"]}, {"crc32", sh["crc32"]}});
        }
        const auto& par = cfg.parallel;
        json meta = {{"format", kCheckpointFormat},
                     {"step", s.step},
                     {"consumed_samples", s.consumed_samples},
                     {"trainer_state",
                      {{"loss_scale", s.state.loss_scale},
                       {"loss_scale_clean", s.state.loss_scale_clean},
                       {"skipped_steps", s.state.skipped_steps}}},
                     {"seed", cfg.train.seed},
                     {"model", model_json(cfg.model)},
                     {"layout",
                      {{"dp", pc.grid.size(Axis::DP)},
                       {"pp", par.pp},
                       {"tp", par.tp},
                       {"cp", pc.grid.size(Axis::CP)},
                       {"zero_stage", s.zero_stage},
                       {"order", par.order}}},
                     {"config", to_yaml(cfg)},
                     {"files", files},
                     {"blocks", blocks}};
        write_text_file_atomic((tmp_dir / "meta.json").string(), meta.dump(1));
        fsync_path(tmp_dir.string());
        fs::remove_all(final_dir);
        fs::rename(tmp_dir, final_dir);
        fsync_path(root.string());
        write_text_file_atomic((root / "latest").string(), checkpoint_step_name(s.step) + "\n");
        int keep = cfg.checkpoint.keep_last;
        auto dirs = checkpoint_step_dirs(root.string());
        for (size_t i = size_t(keep); keep > 0 && i < dirs.size(); ++i)
          fs::remove_all(dirs[i].second);
      },
      pc.world.mpi());
  double bytes = 0, write_s = 0;
  for (const json& sh : shards)
    if (!sh.empty())
      bytes += sh["bytes"].get<double>(), write_s = std::max(write_s, sh["seconds"].get<double>());
  if (pc.rank == 0) {
    char line[320];
    if (async)
      std::snprintf(line, sizeof line,
                    "checkpoint saved: %s (%.1f MB; training paused %.2f s to copy it to host "
                    "memory; written in the background in %.2f s, %.0f MB/s)",
                    final_dir.c_str(), bytes / 1e6, s.stage_s, write_s,
                    bytes / 1e6 / std::max(write_s, 1e-6));
    else {
      const double ms = s.stage_s * 1e3 + sw.ms();  // plus the write, added by save_checkpoint
      std::snprintf(line, sizeof line, "checkpoint saved: %s (%.1f MB in %.2f s, %.0f MB/s)",
                    final_dir.c_str(), bytes / 1e6, ms / 1e3, bytes / 1e3 / std::max(ms, 1e-3));
    }
    info(line);
  }
  return final_dir.string();
}

std::string save_checkpoint(const Config& cfg, int step, int64_t consumed_samples,
                            const ParamLayout& layout, GPTStage& model, ZeroOptimizer& opt,
                            ParallelCtx& pc, const TrainerState& state) {
  Stopwatch sw;
  StagedCheckpoint s =
      stage_checkpoint(cfg, step, consumed_samples, layout, model, opt, pc, state, false);
  collectively([&] { write_staged(s); }, pc.world.mpi());
  s.stage_s = sw.ms() / 1e3;  // the whole stall so far: staging and writing
  return commit_checkpoint(cfg, s, pc, false);
}

}  // namespace loom
