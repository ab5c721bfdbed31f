// Hugging Face weights spread over files: one model.safetensors, or the shards named by a
// model.safetensors.index.json (weight_map: tensor name -> file), read as one set of tensors.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"

namespace loom {

// Reads a small JSON file (config.json, an index): UserError naming `what` and the file when it
// is missing, larger than max_bytes, not JSON or nested deeper than max_depth.
nlohmann::json read_json_file(const std::string& path, const std::string& what,
                              size_t max_bytes = size_t(64) << 20, int max_depth = 8);

// The safetensors tensors of a Hugging Face checkpoint. `path` is a .safetensors file, a
// .json index (model.safetensors.index.json), or a directory holding model.safetensors or
// model.safetensors.index.json (not both). Every file an index names is opened and its header
// validated by the constructor, so a missing or corrupt shard is reported before any read.
class SafetensorsSet {
 public:
  explicit SafetensorsSet(const std::string& path);

  // The file or index the path resolved to, and its directory ("" or ending in '/').
  const std::string& source() const { return source_; }
  const std::string& dir() const { return dir_; }

  // The tensor `name`, or nullptr when the set has none. With an index, a tensor the
  // weight_map names but its file lacks is a UserError naming the index and the file.
  const StTensorInfo* find(const std::string& name) const;
  // The file holding `name` (for messages); "" when there is none.
  std::string file_of(const std::string& name) const;
  // As SafetensorsFile::read_block_f32, in whichever file holds `name`.
  void read_block_f32(const std::string& name, int64_t row0, int64_t col0, int64_t rows,
                      int64_t cols, float* dst, int64_t ld) const;

 private:
  const SafetensorsFile* holder(const std::string& name) const;

  std::string source_, dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

// True when `path` names something SafetensorsSet reads: a .safetensors file, a path ending in
// ".safetensors.index.json", or an existing directory.
bool is_safetensors_source(const std::string& path);

}  // namespace loom
