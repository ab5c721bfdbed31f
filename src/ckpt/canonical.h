// Canonical weights (design "Model"): one HDF5 file with the Hugging Face GPT-2 tensor names
// and unpadded shapes. Loading reads only this rank's shard; saving gathers every shard.
#pragma once
#include <string>

#include "model/param_layout.h"
#include "parallel/parallel_ctx.h"

namespace loom {

// Fills this rank's parameters from a canonical file. Throws UserError naming the file and the
// tensor when a tensor is missing or has the wrong shape; padding vocab rows are set to zero.
// Nothing is written to `params` unless every tensor checks out.
void load_canonical(const std::string& path, const ParamLayout& layout, float* params);

// Gathers the parameters of the dp-rank-0 replica to world rank 0, which writes `path`
// (under a temporary name, renamed when complete). Collective over the world communicator.
void save_canonical(const std::string& path, const ParamLayout& layout, const float* params,
                    ParallelCtx& pc);

}  // namespace loom
