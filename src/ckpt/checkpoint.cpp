// Checkpoint names and step directories, resume discovery and the resharding load (saves:
// checkpoint_save.cpp).
#include "ckpt/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "ckpt/hdf5_util.h"
#include "core/check.h"
#include "core/log.h"
#include "parallel/collective.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace loom {

namespace {

void broadcast_string(std::string& s, ParallelCtx& pc) {
  uint64_t n = s.size();
  pc.world.broadcast(&n, sizeof n, 0);
  s.resize(n);
  if (n) pc.world.broadcast(&s[0], n, 0);
}

}  // namespace

std::string checkpoint_step_name(int step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%07d", step);
  return buf;
}

std::string checkpoint_block_path(int kind, const std::string& tensor, size_t k) {
  static const char* const kinds[3] = {"param", "exp_avg", "exp_avg_sq"};
  return str(kinds[kind], "/", tensor, "/", k);
}

std::vector<std::pair<int, std::string>> checkpoint_step_dirs(const std::string& root) {
  std::vector<std::pair<int, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::string n = e.path().filename().string();
    if (!e.is_directory() || n.rfind("step_", 0) != 0 || n.size() != 12) continue;
    if (n.find_first_not_of("0123456789", 5) != std::string::npos) continue;
    out.emplace_back(std::stoi(n.substr(5)), e.path().string());
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.first > b.first; });
  return out;
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
        for (auto& [step, dir] : checkpoint_step_dirs(cfg.checkpoint_dir())) {
          try {
            rp = verify_checkpoint(dir, cfg.model);
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
          const std::string name = checkpoint_block_path(kind, p.name, size_t(sb->k));
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
  for (const ShardPiece& o : opt.shards().mine()) {
    opt.backend().from_host(opt.m() + o.local, m.data() + o.lo, (o.hi - o.lo) * sizeof(float));
    opt.backend().from_host(opt.v() + o.local, v.data() + o.lo, (o.hi - o.lo) * sizeof(float));
  }
}

Config checkpoint_config(const std::string& dir) {
  const CkptMeta meta = read_checkpoint_meta(dir);
  if (meta.config.empty())
    throw UserError(str("checkpoint '", meta.path, "' holds no 'config': give the config file"));
  return parse_config(meta.config, {}, meta.path);
}

}  // namespace loom
