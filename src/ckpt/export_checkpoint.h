// `loom export` on one process: a checkpoint's parameters to a canonical or Hugging Face file,
// read one pipeline stage of one layer at a time.
#pragma once
#include <string>

#include "config/config.h"

namespace loom {

// Writes the parameters of checkpoint step directory `dir` (trained as `model`) to `path` as
// save_canonical would (the same bytes), without holding the model: the checkpoint is read
// through the resharding load as if split into one pipeline stage per layer, the stage holding
// the tensor being written at a time (one layer; the first and last stages also the embeddings
// and the final norm), and the file is written in chunks of LOOM_GATHER_CHUNK_BYTES.
void export_checkpoint(const std::string& dir, const std::string& path, const ModelConfig& model);

}  // namespace loom
