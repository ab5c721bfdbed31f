// The tensors of an export and the file they go to, one chunk at a time.
#include "ckpt/export_file.h"

#include <algorithm>
#include <map>

#include "ckpt/canonical.h"
#include "ckpt/file_util.h"
#include "ckpt/hf_llama.h"
#include "ckpt/stream_writers.h"
#include "core/check.h"
#include "layout/param_layout.h"

namespace loom {

std::vector<OutTensor> canonical_outs(const ModelConfig& m) {
  const ParamLayout whole(m, 1, 0, 1, 0);
  std::vector<OutTensor> outs;
  for (const ParamSpec& p : whole.params()) {
    OutTensor t;
    t.name = t.source = p.name;
    t.shape = p.ndim == 1 ? std::vector<int64_t>{p.cols} : std::vector<int64_t>{p.rows, p.cols};
    outs.push_back(std::move(t));
  }
  std::sort(outs.begin(), outs.end(),
            [](const OutTensor& a, const OutTensor& b) { return a.name < b.name; });
  return outs;
}

namespace {
// The Hugging Face LlamaForCausalLM tensors of llama model m, sorted by name.
std::vector<OutTensor> llama_hf_outs(const ModelConfig& m) {
  const ParamLayout whole(m, 1, 0, 1, 0);
  std::vector<OutTensor> outs;
  for (const ParamSpec& p : whole.params())
    for (const HfPiece& piece : llama_hf_pieces(m, p.name))
      outs.push_back({piece.name, hf_piece_shape(p.rows, p.ndim, piece), p.name, piece.col0,
                      piece.transposed});
  std::sort(outs.begin(), outs.end(),
            [](const OutTensor& a, const OutTensor& b) { return a.name < b.name; });
  for (size_t i = 1; i < outs.size(); ++i)
    LOOM_CHECK(outs[i - 1].name != outs[i].name, "HF tensor ", outs[i].name, " twice");
  return outs;
}
}  // namespace

std::vector<OutTensor> export_outs(const std::string& path, const ModelConfig& m) {
  return is_safetensors_path(path) && m.llama() ? llama_hf_outs(m) : canonical_outs(m);
}

ExportFile::ExportFile(const std::string& path, const std::vector<OutTensor>& outs)
    : path_(path), outs_(outs) {
  if (is_safetensors_path(path))  // "pt": the format transformers expects
    st_ = std::make_unique<SafetensorsStreamWriter>(
        path, outs, std::map<std::string, std::string>{{"format", "pt"}});
  else
    h5_ = std::make_unique<Hdf5StreamWriter>(path);
}

ExportFile::~ExportFile() = default;

void ExportFile::write(size_t out, const Rect& r, const float* values) {
  if (st_)
    st_->write(values, size_t(r.rows * r.cols));
  else
    h5_->write(outs_[out], r, values);
}

void ExportFile::commit(const ModelConfig* model) {
  if (st_) st_->commit();
  if (h5_) h5_->commit();
  if (st_ && model) {
    const size_t slash = path_.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "" : path_.substr(0, slash + 1);
    write_text_file_atomic(dir + "config.json", model->llama() ? hf_llama_config_json(*model)
                                                               : hf_gpt2_config_json(*model));
  }
}

}  // namespace loom
