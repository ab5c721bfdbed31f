// verify_checkpoint: a checkpoint directory holds a model of this config, and every shard file
// is whole (size and CRC-32 as its meta.json says).
#include <filesystem>

#include "ckpt/checkpoint.h"
#include "ckpt/file_util.h"
#include "ckpt/meta.h"
#include "config/fields.h"
#include "core/check.h"

namespace loom {

namespace fs = std::filesystem;

ResumePoint verify_checkpoint(const std::string& dir, const ModelConfig& model) {
  const CkptMeta meta = read_checkpoint_meta(dir);
  const std::pair<const char*, std::pair<int64_t, int64_t>> dims[] = {
      {"n_layer", {meta.n_layer, model.n_layer}},
      {"n_head", {meta.n_head, model.n_head}},
      {"d_model", {meta.d_model, model.d_model}},
      {"vocab_size", {meta.vocab_size, model.vocab_size}},
      {"positions", {meta.positions, model.positions()}},
      {"tie_embeddings", {meta.tie_embeddings, model.tie_embeddings}},
      {"n_kv_head", {meta.kv_heads, model.kv_heads()}},
      {"ffn_hidden", {meta.ffn, model.ffn()}},
      {"moe.num_experts", {meta.num_experts, model.moe.num_experts}}};
  const char* fix = "; use a checkpoint of this model or set checkpoint.resume: none";
  if (meta.arch != model.arch)
    throw UserError(str("checkpoint '", dir, "' was made for model arch=", meta.arch,
                        ", but this config has ", model.arch, fix));
  for (const auto& [key, v] : dims)
    if (v.first != v.second)
      throw UserError(str("checkpoint '", dir, "' was made for model ", key, "=", v.first,
                          ", but this config has ", v.second, fix));
  // RoPE base and norm epsilon change the function, not the shapes: the same rule.
  if (meta.rope_theta != model.rope_theta || meta.norm_eps != model.norm_eps)
    throw UserError(
        str("checkpoint '", dir, "' was made for model rope_theta=", format_double(meta.rope_theta),
            " norm_eps=", format_double(meta.norm_eps), ", but this config has ",
            format_double(model.rope_theta), " and ", format_double(model.norm_eps), fix));
  for (const CkptFile& f : meta.files) {
    std::string path = (fs::path(dir) / f.file).string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      throw UserError(str("checkpoint '", dir, "': shard '", path, "' is missing"));
    uint64_t bytes = 0;
    uint32_t crc = file_crc32(path, &bytes);
    if (bytes != f.bytes || crc != f.crc32)
      throw UserError(str("checkpoint '", dir, "': shard '", path, "' fails its checksum (", bytes,
                          " bytes, expected ", f.bytes, "): corrupted or truncated"));
  }
  return ResumePoint{dir, meta.step, meta.consumed_samples, meta.state};
}

}  // namespace loom
