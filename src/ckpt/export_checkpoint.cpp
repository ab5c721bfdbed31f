// Streams a checkpoint into an export file, one single-layer pipeline stage in memory at a time.
#include "ckpt/export_checkpoint.h"

#include <memory>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/export_file.h"
#include "core/check.h"
#include "layout/param_layout.h"

namespace loom {

namespace {
// The stage (of n_layer single-layer stages) that holds canonical tensor `name`: its layer's,
// else the first stage (embeddings) or the last (final norm, an untied head).
int stage_of(const ModelConfig& m, const std::string& name) {
  const ParamLayout first(m, 1, 0, m.n_layer, 0);
  if (const ParamSpec* p = first.find(name)) return p->layer >= 0 ? p->layer : 0;
  const ParamLayout last(m, 1, 0, m.n_layer, m.n_layer - 1);
  if (last.find(name)) return m.n_layer - 1;
  const ParamLayout whole(m, 1, 0, 1, 0);
  const ParamSpec& p = whole.get(name);  // InternalError for a name the model lacks
  LOOM_CHECK(p.layer >= 0, "tensor ", name, " is in no stage");
  return p.layer;
}
}  // namespace

void export_checkpoint(const std::string& dir, const std::string& path, const ModelConfig& model) {
  const std::vector<OutTensor> outs = export_outs(path, model);
  const int64_t elems = gather_chunk_bytes() / int64_t(sizeof(float));
  ExportFile file(path, outs);
  std::unique_ptr<ParamLayout> stage;  // the stage in memory and its parameters
  std::vector<float> params;
  std::vector<float> chunk;
  for (size_t i = 0; i < outs.size(); ++i) {
    const OutTensor& o = outs[i];
    if (!stage || !stage->find(o.source)) {
      stage.reset();
      params = std::vector<float>();  // free the last stage before reading the next
      stage = std::make_unique<ParamLayout>(model, 1, 0, model.n_layer, stage_of(model, o.source));
      params.assign(stage->total(), 0.0f);
      read_checkpoint_tensors(dir, *stage, params.data(), nullptr, nullptr);
    }
    for (int64_t c = 0, n = chunk_count(o.rows(), o.cols(), elems); c < n; ++c) {
      const Rect r = chunk_rect(o.rows(), o.cols(), elems, c);
      chunk.resize(size_t(r.rows * r.cols));
      local_chunk(o, r, *stage, params.data(), chunk.data());
      file.write(i, r, chunk.data());
    }
  }
  file.commit(&model);
}

}  // namespace loom
