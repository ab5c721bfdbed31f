// Sharded, atomic, resharding checkpoints (design "Checkpoints"):
//   <dir>/step_NNNNNNN/meta.json           step, consumed samples, seed, config, layout, the
//                                          index of every stored tensor block, file checksums
//   <dir>/step_NNNNNNN/shard_ppP_tpT.h5    written by DP rank 0 of each (pp, tp): for each
//                                          tensor this rank owns, param/exp_avg/exp_avg_sq
//                                          blocks with their global offsets
//   <dir>/latest                           the name of the newest complete step directory
// A checkpoint is written under step_NNNNNNN.tmp and renamed when every file is on disk, so
// a crash mid-save leaves the previous checkpoints intact. Any valid (dp, pp, tp, zero) layout
// can load any checkpoint of the same model: each rank reads the global regions it holds.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/meta.h"
#include "config/config.h"
#include "model/gpt_stage.h"
#include "optim/zero.h"
#include "parallel/parallel_ctx.h"

namespace loom {

struct ResumePoint {
  std::string dir;  // step directory; empty: start fresh
  int step = 0;     // optimizer steps done
  int64_t consumed_samples = 0;
  TrainerState state;
};

// "step_0000042": the directory name of a step's checkpoint.
std::string checkpoint_step_name(int step);
// The dataset of block k of a tensor in a shard, "<kind>/<tensor>/<k>"; kind 0, 1, 2: param,
// exp_avg, exp_avg_sq.
std::string checkpoint_block_path(int kind, const std::string& tensor, size_t k);
// The committed step directories under root (number, path), newest first; ".tmp" leftovers of
// interrupted saves are not among them.
std::vector<std::pair<int, std::string>> checkpoint_step_dirs(const std::string& root);

// Writes the checkpoint of `step` (consumed_samples sequences so far) under
// cfg.checkpoint_dir(), then keeps the newest cfg.checkpoint.keep_last (0: all). Collective and
// synchronous: stage, write and commit (checkpoint_save.h). Returns the step directory.
std::string save_checkpoint(const Config& cfg, int step, int64_t consumed_samples,
                            const ParamLayout& layout, GPTStage& model, ZeroOptimizer& opt,
                            ParallelCtx& pc, const TrainerState& state = {});

// What cfg.checkpoint.resume asks for: "none" -> nothing; "auto" -> the newest step directory
// under cfg.checkpoint_dir() whose meta.json parses, matches the model and whose files pass
// their checksums (others are skipped with a warning naming the file); a path -> that
// directory, which must be valid (UserError otherwise). Collective; the same answer on all ranks.
ResumePoint find_resume(const Config& cfg, ParallelCtx& pc);

// Loads parameters and AdamW moments of `dir` into this rank's shard of the current layout.
void load_checkpoint(const std::string& dir, const ParamLayout& layout, ZeroOptimizer& opt);
// Reads the global regions `layout` holds: parameters into params (flat, layout offsets) and,
// when m and v are given, the whole-stage AdamW moments. UserError names a missing tensor/shard.
void read_checkpoint_tensors(const std::string& dir, const ParamLayout& layout, float* params,
                             float* m, float* v);
// A step directory as given, or the one named by `latest` when given a checkpoint.dir.
std::string resolve_checkpoint_dir(const std::string& path);
// The config a checkpoint was trained with (from its meta.json).
Config checkpoint_config(const std::string& dir);

// Checks a step directory on this process: meta.json parses, names this model, and every
// file has its recorded size and CRC-32. Throws UserError naming the file and the problem.
ResumePoint verify_checkpoint(const std::string& dir, const ModelConfig& model);

}  // namespace loom
