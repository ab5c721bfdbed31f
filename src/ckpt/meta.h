// A checkpoint's meta.json, read and checked in one place: every field the loaders use has
// its type and range checked here, so a hand-edited or corrupt file gives one clear error.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"

namespace loom {

// Trainer scalars beyond the step: the loss scaler (0: none) and the steps skipped on
// gradient overflow (AdamW's bias correction counts applied updates only).
struct TrainerState {
  double loss_scale = 0;
  int loss_scale_clean = 0;
  int skipped_steps = 0;
};

struct CkptFile {
  std::string file;  // a plain file name inside the step directory
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

// A stored rectangle [grow, grow+rows) x [gcol, gcol+cols) of a canonical tensor, in dataset
// <kind>/<tensor>/<k> of `file` (one of the listed files).
struct CkptBlock {
  std::string tensor, file;
  int64_t k = 0, grow = 0, gcol = 0, rows = 0, cols = 0;
};

struct CkptMeta {
  std::string path;  // .../meta.json, for messages
  int step = 0;
  int64_t consumed_samples = 0;
  TrainerState state;
  int n_layer = 0, n_head = 0, d_model = 0, vocab_size = 0, positions = 0;
  bool tie_embeddings = false;
  // The family's keys; checkpoints that predate them are gpt2 with n_head kv heads and 4*d_model.
  std::string arch = "gpt2";
  int kv_heads = 0, ffn = 0;
  double rope_theta = 10000.0, norm_eps = 1e-5;
  int num_experts = 0, top_k = 0;  // Mixture of Experts; absent (dense) in earlier checkpoints
  std::string config;  // the resolved YAML config ("" when absent)
  std::vector<CkptFile> files;
  std::vector<CkptBlock> blocks;
};

extern const char* const kCheckpointFormat;  // "loom-checkpoint-1"

// Reads <dir>/meta.json. UserError naming the file, the key and what is wrong.
CkptMeta read_checkpoint_meta(const std::string& dir);

// The stored blocks of one tensor (rows x cols) must lie inside it and must not overlap: then
// counting the elements they cover finds any gap. At most 1024 blocks per tensor (tp up to
// 341 for the three-part QKV weight) bounds the pairwise check. UserError otherwise.
void check_stored_blocks(const std::string& meta_path, const std::string& tensor, int64_t rows,
                         int64_t cols, const std::vector<const CkptBlock*>& blocks);

}  // namespace loom
