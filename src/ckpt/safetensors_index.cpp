// Sharded safetensors: path resolution (file, index or directory), index validation, routing
// of tensor lookups and block reads to the shard that holds each tensor.
#include "ckpt/safetensors_index.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ckpt/canonical.h"
#include "core/check.h"
#include "core/json_util.h"

namespace loom {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

bool ends_with_nocase(const std::string& s, const std::string& tail) {
  if (s.size() < tail.size()) return false;
  for (size_t i = 0; i < tail.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[s.size() - tail.size() + i])) != tail[i])
      return false;
  return true;
}

std::string dir_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

// A shard name must stay inside the index's directory: relative, no ".." component.
bool plain_relative(const std::string& f) {
  if (f.empty() || f[0] == '/') return false;
  for (const auto& part : fs::path(f))
    if (part == "..") return false;
  return true;
}

}  // namespace

json read_json_file(const std::string& path, const std::string& what, size_t max_bytes,
                    int max_depth) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw UserError(str(what, " '", path, "' is missing or not a regular file"));
  const uintmax_t size = fs::file_size(path, ec);
  if (ec || size > max_bytes)
    throw UserError(str(what, " '", path, "' is ",
                        ec ? std::string("unreadable") : str(size, " bytes"), " (at most ",
                        max_bytes, " bytes are read: is it the right file?)"));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(str(what, " '", path, "' cannot be opened"));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_json_text(text.str(), max_depth, str(what, " '", path, "'"));
}

bool is_safetensors_source(const std::string& path) {
  std::error_code ec;
  return is_safetensors_path(path) || ends_with_nocase(path, ".json") || fs::is_directory(path, ec);
}

SafetensorsSet::SafetensorsSet(const std::string& path) {
  std::error_code ec;
  source_ = path;
  if (fs::is_directory(path, ec)) {
    const std::string d = path.back() == '/' ? path : path + "/";
    const bool single = fs::exists(d + "model.safetensors", ec);
    const bool index = fs::exists(d + "model.safetensors.index.json", ec);
    if (single && index)
      throw UserError(
          str("init directory '", path, "' holds both model.safetensors and ",
              "model.safetensors.index.json (name the one to read in train.init_from)"));
    if (!single && !index)
      throw UserError(str("init directory '", path, "' holds neither model.safetensors nor ",
                          "model.safetensors.index.json (point train.init_from at the weights)"));
    source_ = d + (single ? "model.safetensors" : "model.safetensors.index.json");
  }
  dir_ = dir_of(source_);
  if (is_safetensors_path(source_)) {
    files_.push_back(std::make_unique<SafetensorsFile>(source_));
    for (const auto& kv : files_[0]->tensors()) where_[kv.first] = 0;
    return;
  }
  const std::string where = str("safetensors index '", source_, "'");
  // {"metadata": {...}, "weight_map": {name: file}}: 3 levels.
  const json j = read_json_file(source_, "safetensors index", size_t(64) << 20, 4);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw UserError(str(where, " has no 'weight_map' object (not a Hugging Face ",
                        "model.safetensors.index.json)"));
  const json& wm = j["weight_map"];
  if (wm.empty()) throw UserError(str(where, ": 'weight_map' is empty"));
  std::map<std::string, size_t> file_index;
  std::vector<std::string> first_tensor;  // per file, for messages
  for (auto it = wm.begin(); it != wm.end(); ++it) {
    if (!it.value().is_string())
      throw UserError(str(where, ": weight_map entry '", it.key(), "' is ", json_brief(it.value()),
                          ", not a file name"));
    const std::string f = it.value().get<std::string>();
    if (!plain_relative(f))
      throw UserError(str(where, ": weight_map entry '", it.key(), "' names file '", f,
                          "' outside the index's directory (shards must lie next to the index)"));
    auto ins = file_index.emplace(f, file_index.size());
    if (ins.second) first_tensor.push_back(it.key());
    where_[it.key()] = ins.first->second;
  }
  files_.resize(file_index.size());
  for (const auto& [f, i] : file_index) {
    const std::string p = dir_ + f;
    if (!fs::is_regular_file(p, ec))
      throw UserError(str(where, " names shard '", f, "' (tensor '", first_tensor[i], "'), but '",
                          p, "' does not exist (copy every shard next to the index)"));
    files_[i] = std::make_unique<SafetensorsFile>(p);
  }
}

const SafetensorsFile* SafetensorsSet::holder(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : files_[it->second].get();
}

const StTensorInfo* SafetensorsSet::find(const std::string& name) const {
  const SafetensorsFile* f = holder(name);
  if (!f) return nullptr;
  const StTensorInfo* t = f->find(name);
  if (!t)
    throw UserError(str("safetensors index '", source_, "' maps tensor '", name, "' to '",
                        f->path(),
                        "', which has no such tensor (the index does not match its shards)"));
  return t;
}

std::string SafetensorsSet::file_of(const std::string& name) const {
  const SafetensorsFile* f = holder(name);
  return f ? f->path() : "";
}

void SafetensorsSet::read_block_f32(const std::string& name, int64_t row0, int64_t col0,
                                    int64_t rows, int64_t cols, float* dst, int64_t ld) const {
  const SafetensorsFile* f = holder(name);
  if (!f) throw UserError(str("'", source_, "' has no tensor '", name, "'"));
  f->read_block_f32(name, row0, col0, rows, cols, dst, ld);
}

}  // namespace loom
