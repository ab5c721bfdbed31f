// Checkpoint save (gather moments to DP rank 0, one HDF5 shard per (pp, tp), atomic commit),
// verification, resume discovery and resharding load.
#include "ckpt/checkpoint.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

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

const char* kKinds[3] = {"param", "exp_avg", "exp_avg_sq"};

std::string step_name(int step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%07d", step);
  return buf;
}

std::string block_path(const char* kind, const std::string& tensor, size_t k) {
  return str(kind, "/", tensor, "/", k);
}

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

// Gathers a ZeRO-sharded buffer (moments; ZeRO-3 parameters) to DP rank 0 as the whole flat
// buffer (stage 0: as is).
std::vector<float> gather_moment(const float* shard, ZeroOptimizer& opt, size_t total,
                                 ParallelCtx& pc) {
  const ShardRange r = opt.shard();  // shard: backend (device) memory
  if (opt.stage() == 0) {
    std::vector<float> all(total);
    opt.backend().to_host(all.data(), shard, total * sizeof(float));
    return all;
  }
  const Comm& reps = pc.replicas();  // ZeRO's shards: over dp x cp
  const size_t S = zero_shard_size(total, reps.size());
  std::vector<float> mine(S, 0.0f);
  opt.backend().to_host(mine.data(), shard, (r.hi - r.lo) * sizeof(float));
  std::vector<float> all(reps.rank() == 0 ? S * size_t(reps.size()) : 0);
  LOOM_CHECK(S <= size_t(INT_MAX), "moment shard of ", S, " elements");
  LOOM_MPI(
      MPI_Gather(mine.data(), int(S), MPI_FLOAT, all.data(), int(S), MPI_FLOAT, 0, reps.mpi()));
  all.resize(reps.rank() == 0 ? total : 0);
  return all;
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

void broadcast_string(std::string& s, ParallelCtx& pc) {
  uint64_t n = s.size();
  pc.world.broadcast(&n, sizeof n, 0);
  s.resize(n);
  if (n) pc.world.broadcast(&s[0], n, 0);
}

// Writes this (pp, tp) rank's tensor blocks (only the experts' with experts_only: a rank of the
// first expert replica other than dp0); returns its index entries and file record.
json write_shard(const std::string& file, const ParamLayout& layout, const float* params,
                 const float* m, const float* v, bool experts_only) {
  json blocks = json::array();
  {
    h5::Handle f = h5::create(file);
    std::vector<float> tmp;
    for (const ParamSpec& p : layout.params()) {
      if (!p.norm_owner) continue;  // replicas and the tied copy: stored once, elsewhere
      if (experts_only && !p.expert) continue;
      std::vector<ShardBlock> bl = layout.blocks(p);
      for (size_t k = 0; k < bl.size(); ++k) {
        const ShardBlock& b = bl[k];
        const float* src[3] = {params + p.offset, m + p.offset, v + p.offset};
        for (int kind = 0; kind < 3; ++kind) {
          tmp.resize(size_t(b.rows * b.cols));
          for (int64_t r = 0; r < b.rows; ++r)
            std::copy_n(src[kind] + (b.lrow + r) * p.lcols + b.lcol, b.cols,
                        &tmp[size_t(r * b.cols)]);
          h5::write_f32_2d(f.get(), block_path(kKinds[kind], p.name, k), hsize_t(b.rows),
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

// Step directories under root, newest first (".tmp" leftovers of interrupted saves excluded).
std::vector<std::pair<int, fs::path>> step_dirs(const fs::path& root) {
  std::vector<std::pair<int, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::string n = e.path().filename().string();
    if (!e.is_directory() || n.rfind("step_", 0) != 0 || n.size() != 12) continue;
    if (n.find_first_not_of("0123456789", 5) != std::string::npos) continue;
    out.emplace_back(std::stoi(n.substr(5)), e.path());
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.first > b.first; });
  return out;
}

}  // namespace

std::string save_checkpoint(const Config& cfg, int step, int64_t consumed_samples,
                            const ParamLayout& layout, GPTStage& model, ZeroOptimizer& opt,
                            ParallelCtx& pc, const TrainerState& state) {
  Stopwatch sw;
  const fs::path root = cfg.checkpoint_dir();
  const fs::path final_dir = root / step_name(step);
  const fs::path tmp_dir = root / (step_name(step) + ".tmp");
  collectively(
      [&] {
        if (pc.rank != 0) return;
        fs::create_directories(root);
        fs::remove_all(tmp_dir);
        fs::create_directory(tmp_dir);
      },
      pc.world.mpi());

  const size_t total = layout.total();
  std::vector<float> m = gather_moment(opt.m(), opt, total, pc);
  std::vector<float> v = gather_moment(opt.v(), opt, total, pc);
  std::vector<float> p3;  // ZeRO-3 keeps parameters sharded too: gather them the same way
  if (opt.stage() == 3)
    p3 = gather_moment(opt.param_shard(), opt, total, pc);
  else if (pc.expert_replica_index() == 0) {
    p3.resize(total);
    model.backend().to_host(p3.data(), model.params(), total * sizeof(float));
  }
  const float* params = p3.data();
  json mine = json::object();
  collectively(
      [&] {
        // One replica (dp0, cp0) writes; with expert parallelism the other ranks of the first
        // expert replica (dp < ep) write their experts.
        if (pc.expert_replica_index() != 0) return;
        const bool experts_only = pc.replica_index() != 0;
        std::string file = (tmp_dir / str("shard_pp", pc.coord.pp, "_tp", pc.coord.tp,
                                          experts_only ? str("_ep", pc.ep_rank()) : "", ".h5"))
                               .string();
        mine = write_shard(file, layout, params, m.data(), v.data(), experts_only);
      },
      pc.world.mpi());
  // Fault injection for the checkpoint tests: LOOM_FAULT_KILL_IN_SAVE=STEP makes the last rank
  // die by SIGKILL after the shards are written and before the checkpoint is committed.
  if (const char* f = std::getenv("LOOM_FAULT_KILL_IN_SAVE"))
    if (std::atoi(f) == step && pc.rank == pc.world.size() - 1) std::raise(SIGKILL);
  std::vector<json> shards = gather_json(mine, pc);

  collectively(
      [&] {
        if (pc.rank != 0) return;
        json files = json::array(), blocks = json::array();
        for (json& s : shards) {
          if (s.empty()) continue;
          for (json& b : s["blocks"]) {
            b["file"] = s["file"];
            blocks.push_back(b);
          }
          files.push_back({{"file", s["file"]}, {"bytes", s["bytes"]}, {"crc32", s["crc32"]}});
        }
        const auto& par = cfg.parallel;
        json meta = {{"format", kCheckpointFormat},
                     {"step", step},
                     {"consumed_samples", consumed_samples},
                     {"trainer_state",
                      {{"loss_scale", state.loss_scale},
                       {"loss_scale_clean", state.loss_scale_clean},
                       {"skipped_steps", state.skipped_steps}}},
                     {"seed", cfg.train.seed},
                     {"model", model_json(cfg.model)},
                     {"layout",
                      {{"dp", pc.grid.size(Axis::DP)},
                       {"pp", par.pp},
                       {"tp", par.tp},
                       {"cp", pc.grid.size(Axis::CP)},
                       {"zero_stage", opt.stage()},
                       {"order", par.order}}},
                     {"config", to_yaml(cfg)},
                     {"files", files},
                     {"blocks", blocks}};
        write_text_file_atomic((tmp_dir / "meta.json").string(), meta.dump(1));
        fsync_path(tmp_dir.string());
        fs::remove_all(final_dir);
        fs::rename(tmp_dir, final_dir);
        fsync_path(root.string());
        write_text_file_atomic((root / "latest").string(), step_name(step) + "\n");
        int keep = cfg.checkpoint.keep_last;
        auto dirs = step_dirs(root);
        for (size_t i = size_t(keep); keep > 0 && i < dirs.size(); ++i)
          fs::remove_all(dirs[i].second);
      },
      pc.world.mpi());
  double bytes = 0;
  for (const json& sh : shards)
    if (!sh.empty()) bytes += sh["bytes"].get<double>();
  if (pc.rank == 0) {
    char line[256];
    std::snprintf(line, sizeof line, "checkpoint saved: %s (%.1f MB in %.2f s, %.0f MB/s)",
                  final_dir.c_str(), bytes / 1e6, sw.ms() / 1e3,
                  bytes / 1e3 / std::max(sw.ms(), 1e-3));
    info(line);
  }
  return final_dir.string();
}

std::string resolve_checkpoint_dir(const std::string& path) {
  fs::path p = path;
  std::error_code ec;
  if (!fs::exists(p, ec)) throw UserError(str("checkpoint '", path, "' does not exist"));
  if (!fs::exists(p / "meta.json", ec) && fs::exists(p / "latest", ec)) {
    std::ifstream in(p / "latest");
    std::string name;
    in >> name;
    // Only what save_checkpoint writes there: a step directory beside `latest`.
    if (name.size() != 12 || name.rfind("step_", 0) != 0 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
      throw UserError(str("checkpoint '", (p / "latest").string(), "' names '", name.substr(0, 40),
                          "', not a step directory (step_NNNNNNN): the file is corrupt; give a "
                          "step directory instead"));
    p /= name;
  }
  return p.string();
}

ResumePoint find_resume(const Config& cfg, ParallelCtx& pc) {
  ResumePoint rp;
  const std::string& want = cfg.checkpoint.resume;
  if (want == "none") return rp;
  collectively(
      [&] {
        if (pc.rank != 0) return;
        if (want != "auto") {
          std::error_code ec;
          if (!fs::exists(want, ec))
            throw UserError(str("checkpoint.resume: '", want, "' does not exist"));
          rp = verify_checkpoint(resolve_checkpoint_dir(want), cfg.model);
          return;
        }
        for (auto& [step, dir] : step_dirs(cfg.checkpoint_dir())) {
          try {
            rp = verify_checkpoint(dir.string(), cfg.model);
            return;
          } catch (const UserError& e) {
            warn("skipping checkpoint: ", e.what());
          }
        }
      },
      pc.world.mpi());
  broadcast_string(rp.dir, pc);
  pc.world.broadcast(&rp.step, sizeof rp.step, 0);
  pc.world.broadcast(&rp.consumed_samples, sizeof rp.consumed_samples, 0);
  pc.world.broadcast(&rp.state, sizeof rp.state, 0);
  return rp;
}

void read_checkpoint_tensors(const std::string& dir, const ParamLayout& layout, float* params,
                             float* m, float* v) {
  const CkptMeta meta = read_checkpoint_meta(dir);
  std::map<std::string, std::vector<const CkptBlock*>> stored;  // tensor -> its stored blocks
  for (const CkptBlock& b : meta.blocks) stored[b.tensor].push_back(&b);
  std::map<std::string, h5::Handle> files;
  auto file = [&](const std::string& name) -> hid_t {
    auto it = files.find(name);
    if (it == files.end())
      it = files.emplace(name, h5::open_read((fs::path(dir) / name).string(), "checkpoint shard"))
               .first;
    return it->second.get();
  };

  float* dst[3] = {params, m, v};
  const int kinds = m && v ? 3 : 1;
  for (const ParamSpec& p : layout.params()) {
    auto it = stored.find(p.name);
    if (it == stored.end())
      throw UserError(str("checkpoint '", dir, "' has no tensor '", p.name, "'"));
    check_stored_blocks(meta.path, p.name, p.rows, p.cols, it->second);
    int64_t covered = 0, needed = 0;
    for (int kind = 0; kind < kinds; ++kind) std::fill_n(dst[kind] + p.offset, p.numel(), 0.0f);
    for (const ShardBlock& lb : layout.blocks(p)) {
      needed += lb.rows * lb.cols;
      for (const CkptBlock* sb : it->second) {
        const int64_t sr = sb->grow, sc = sb->gcol, nr = sb->rows, nc = sb->cols;
        int64_t r0 = std::max(lb.grow, sr), r1 = std::min(lb.grow + lb.rows, sr + nr);
        int64_t c0 = std::max(lb.gcol, sc), c1 = std::min(lb.gcol + lb.cols, sc + nc);
        if (r0 >= r1 || c0 >= c1) continue;
        covered += (r1 - r0) * (c1 - c0);
        const std::string path = (fs::path(dir) / sb->file).string();
        const hid_t f = file(sb->file);
        for (int kind = 0; kind < kinds; ++kind) {
          const std::string name = block_path(kKinds[kind], p.name, size_t(sb->k));
          const std::vector<hsize_t> shape = h5::dataset_shape(f, name, path);
          if (shape != std::vector<hsize_t>{hsize_t(nr), hsize_t(nc)})
            throw UserError(str("checkpoint shard '", path, "': dataset '", name, "' has ",
                                shape.size(), " dimensions or another shape than the ", nr, "x", nc,
                                " block meta.json describes: the checkpoint is corrupt"));
          float* out =
              dst[kind] + p.offset + (lb.lrow + r0 - lb.grow) * p.lcols + lb.lcol + (c0 - lb.gcol);
          h5::read_block_f32(f, name, hsize_t(r0 - sr), hsize_t(c0 - sc), hsize_t(r1 - r0),
                             hsize_t(c1 - c0), out, hsize_t(p.lcols), path);
        }
      }
    }
    if (covered != needed)
      throw UserError(str("checkpoint '", dir, "' covers ", covered, " of the ", needed,
                          " elements of '", p.name, "' this rank needs (a shard is missing)"));
  }
}

void load_checkpoint(const std::string& dir, const ParamLayout& layout, ZeroOptimizer& opt) {
  // Whole-stage tensors are read, then this rank keeps its ZeRO part of them.
  std::vector<float> p(layout.total()), m(layout.total()), v(layout.total());
  read_checkpoint_tensors(dir, layout, p.data(), m.data(), v.data());
  opt.set_full_params(p.data());
  const ShardRange r = opt.shard();
  opt.backend().from_host(opt.m(), m.data() + r.lo, (r.hi - r.lo) * sizeof(float));
  opt.backend().from_host(opt.v(), v.data() + r.lo, (r.hi - r.lo) * sizeof(float));
}

Config checkpoint_config(const std::string& dir) {
  const CkptMeta meta = read_checkpoint_meta(dir);
  if (meta.config.empty())
    throw UserError(str("checkpoint '", meta.path, "' holds no 'config': give the config file"));
  return parse_config(meta.config, {}, meta.path);
}

}  // namespace loom
