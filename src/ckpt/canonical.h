// Canonical weights (design "Model"): one HDF5 file with the Hugging Face GPT-2 tensor names
// and unpadded shapes. Loading reads only this rank's shard; saving gathers every shard.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "parallel/parallel_ctx.h"

namespace loom {

// Fills this rank's parameters from a canonical file. Throws UserError naming the file and the
// tensor when a tensor is missing or has the wrong shape; padding vocab rows are set to zero.
// Nothing is written to `params` unless every tensor checks out.
void load_canonical(const std::string& path, const ParamLayout& layout, float* params);

// A whole canonical tensor: shape as in the file (1-D tensors have rows == 1, ndim == 1).
struct CanonicalTensor {
  int64_t rows = 0, cols = 0;
  int ndim = 0;
  std::vector<float> data;
};

// Gathers every canonical tensor (from the dp-rank-0 replica) to world rank 0; other ranks get
// an empty map. Collective over pc.world.
std::map<std::string, CanonicalTensor> gather_canonical(const ParamLayout& layout,
                                                        const float* params, ParallelCtx& pc);

// Gathers the parameters of the dp-rank-0 replica to world rank 0, which writes `path`
// (under a temporary name, renamed when complete). Collective over the world communicator.
void save_canonical(const std::string& path, const ParamLayout& layout, const float* params,
                    ParallelCtx& pc);

}  // namespace loom
