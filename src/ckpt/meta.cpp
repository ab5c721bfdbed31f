// meta.json of a checkpoint: parse, then check each field's type and range.
#include "ckpt/meta.h"

#include <climits>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/json_util.h"

namespace loom {

const char* const kCheckpointFormat = "loom-checkpoint-1";

namespace {

using json = nlohmann::json;

// Any stored offset or extent is at most 2^40: sums of two never overflow int64.
constexpr int64_t kMaxExtent = int64_t(1) << 40;

class Fields {
 public:
  explicit Fields(const std::string& path) : path_(path) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw UserError(str("checkpoint '", path_, "': ", key, " ", what,
                        " (the file is corrupt or was edited; use another checkpoint)"));
  }
  const json& get(const json& obj, const std::string& scope, const char* key) const {
    const std::string name = scope.empty() ? key : scope + "." + key;
    if (!obj.is_object()) fail(scope.empty() ? "the top level" : scope, "must be an object");
    auto it = obj.find(key);
    if (it == obj.end()) fail(name, "is missing");
    return *it;
  }
  int64_t integer(const json& v, const std::string& key, int64_t lo, int64_t hi) const {
    int64_t x = 0;
    if (v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t(INT64_MAX))
      x = v.get<int64_t>();
    else if (v.is_number_integer() && !v.is_number_unsigned())
      x = v.get<int64_t>();
    else
      fail(key, "must be an integer, got " + json_brief(v));
    if (x < lo || x > hi) fail(key, str("must be in [", lo, ", ", hi, "], got ", x));
    return x;
  }
  std::string string(const json& v, const std::string& key) const {
    if (!v.is_string()) fail(key, "must be a string, got " + json_brief(v));
    return v.get<std::string>();
  }
  bool boolean(const json& v, const std::string& key) const {
    if (!v.is_boolean()) fail(key, "must be true or false, got " + json_brief(v));
    return v.get<bool>();
  }
  double number(const json& v, const std::string& key) const {
    if (!v.is_number() || !(v.get<double>() >= 0) || v.get<double>() > 1e38)
      fail(key, "must be a number >= 0, got " + json_brief(v));
    return v.get<double>();
  }
  // A file name inside the step directory: no directory part, so nothing outside is read.
  std::string file_name(const json& v, const std::string& key) const {
    std::string s = string(v, key);
    if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos ||
        s.find('\0') != std::string::npos)
      fail(key, "must be a file name inside the checkpoint directory, got " + json_brief(v));
    return s;
  }

 private:
  const std::string& path_;
};

}  // namespace

CkptMeta read_checkpoint_meta(const std::string& dir) {
  CkptMeta m;
  m.path = (std::filesystem::path(dir) / "meta.json").string();
  std::ifstream in(m.path, std::ios::binary);
  if (!in) throw UserError(str("checkpoint '", dir, "': meta.json is missing or unreadable"));
  std::ostringstream text;
  text << in.rdbuf();
  // meta.json nests 3 levels (blocks[i].tensor); 16 leaves room for later versions.
  const json j = parse_json_text(text.str(), 16, str("checkpoint '", m.path, "' does not parse"));
  const Fields f(m.path);
  if (!j.is_object() || !j.contains("format") || j["format"] != kCheckpointFormat)
    throw UserError(str("checkpoint '", m.path, "': not a loom checkpoint (format ",
                        j.is_object() && j.contains("format") ? json_brief(j["format"]) : "missing",
                        ", expected '", kCheckpointFormat, "')"));
  m.step = int(f.integer(f.get(j, "", "step"), "step", 0, INT_MAX));
  m.consumed_samples =
      f.integer(f.get(j, "", "consumed_samples"), "consumed_samples", 0, INT64_MAX);
  if (j.contains("trainer_state")) {  // absent in checkpoints of earlier versions
    const json& t = j["trainer_state"];
    const std::string s = "trainer_state";
    m.state.loss_scale = f.number(f.get(t, s, "loss_scale"), s + ".loss_scale");
    m.state.loss_scale_clean =
        int(f.integer(f.get(t, s, "loss_scale_clean"), s + ".loss_scale_clean", 0, INT_MAX));
    m.state.skipped_steps =
        int(f.integer(f.get(t, s, "skipped_steps"), s + ".skipped_steps", 0, INT_MAX));
  }
  const json& model = f.get(j, "", "model");
  auto dim = [&](const char* key) {
    return int(f.integer(f.get(model, "model", key), str("model.", key), 1, INT_MAX));
  };
  m.n_layer = dim("n_layer"), m.n_head = dim("n_head"), m.d_model = dim("d_model");
  m.vocab_size = dim("vocab_size"), m.positions = dim("positions");
  m.tie_embeddings = f.boolean(f.get(model, "model", "tie_embeddings"), "model.tie_embeddings");
  m.kv_heads = m.n_head, m.ffn = 4 * m.d_model;
  if (model.contains("arch")) {
    m.arch = f.string(model["arch"], "model.arch");
    m.kv_heads = dim("kv_heads"), m.ffn = dim("ffn");
    m.rope_theta = f.number(f.get(model, "model", "rope_theta"), "model.rope_theta");
    m.norm_eps = f.number(f.get(model, "model", "norm_eps"), "model.norm_eps");
  }
  if (model.contains("num_experts")) {
    m.num_experts = int(f.integer(model["num_experts"], "model.num_experts", 0, INT_MAX));
    m.top_k = int(f.integer(f.get(model, "model", "top_k"), "model.top_k", 0, INT_MAX));
  }
  if (j.contains("config")) m.config = f.string(j["config"], "config");

  const json& files = f.get(j, "", "files");
  if (!files.is_array()) f.fail("files", "must be an array, got " + json_brief(files));
  std::set<std::string> names;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string s = str("files[", i, "]");
    CkptFile cf;
    cf.file = f.file_name(f.get(files[i], s, "file"), s + ".file");
    cf.bytes = uint64_t(f.integer(f.get(files[i], s, "bytes"), s + ".bytes", 0, INT64_MAX));
    cf.crc32 = uint32_t(f.integer(f.get(files[i], s, "crc32"), s + ".crc32", 0, UINT32_MAX));
    if (!names.insert(cf.file).second) f.fail(s + ".file", "names '" + cf.file + "' twice");
    m.files.push_back(cf);
  }
  const json& blocks = f.get(j, "", "blocks");
  if (!blocks.is_array()) f.fail("blocks", "must be an array, got " + json_brief(blocks));
  for (size_t i = 0; i < blocks.size(); ++i) {
    const json& b = blocks[i];
    const std::string s = str("blocks[", i, "]");
    CkptBlock cb;
    cb.tensor = f.string(f.get(b, s, "tensor"), s + ".tensor");
    cb.file = f.string(f.get(b, s, "file"), s + ".file");
    if (!names.count(cb.file))
      f.fail(s + ".file", "names '" + cb.file + "', which is not in 'files'");
    cb.k = f.integer(f.get(b, s, "k"), s + ".k", 0, INT_MAX);
    cb.grow = f.integer(f.get(b, s, "grow"), s + ".grow", 0, kMaxExtent);
    cb.gcol = f.integer(f.get(b, s, "gcol"), s + ".gcol", 0, kMaxExtent);
    cb.rows = f.integer(f.get(b, s, "rows"), s + ".rows", 1, kMaxExtent);
    cb.cols = f.integer(f.get(b, s, "cols"), s + ".cols", 1, kMaxExtent);
    m.blocks.push_back(cb);
  }
  return m;
}

void check_stored_blocks(const std::string& meta_path, const std::string& tensor, int64_t rows,
                         int64_t cols, const std::vector<const CkptBlock*>& blocks) {
  const std::string where = str("checkpoint '", meta_path, "': tensor '", tensor, "'");
  if (blocks.size() > 1024)
    throw UserError(
        str(where, " has ", blocks.size(), " blocks (at most 1024): the file is corrupt"));
  for (size_t i = 0; i < blocks.size(); ++i) {
    const CkptBlock& a = *blocks[i];
    if (a.grow + a.rows > rows || a.gcol + a.cols > cols)
      throw UserError(str(where, " has a block [", a.grow, ", ", a.grow + a.rows, ") x [", a.gcol,
                          ", ", a.gcol + a.cols, ") outside its ", rows, "x", cols,
                          " shape: the file is corrupt or of another model"));
    for (size_t j = 0; j < i; ++j) {
      const CkptBlock& b = *blocks[j];
      if (a.grow < b.grow + b.rows && b.grow < a.grow + a.rows && a.gcol < b.gcol + b.cols &&
          b.gcol < a.gcol + a.cols)
        throw UserError(
            str(where, " has overlapping blocks ", j, " and ", i, ": the file is corrupt"));
    }
  }
}

}  // namespace loom
