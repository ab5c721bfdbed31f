// Counter-based initialization keyed by (seed, parameter name) and the canonical element index.
#include "model/init.h"

#include <cmath>
#include <cstring>

#include "core/rng.h"

namespace loom {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void init_params(const ParamLayout& layout, const ModelConfig& m, uint64_t seed, float* params) {
  for (const ParamSpec& p : layout.params()) {
    float* dst = params + p.offset;
    std::memset(dst, 0, p.numel() * sizeof(float));
    bool is_ln = p.name.find("ln_") != std::string::npos;
    if (is_ln && ends_with(p.name, ".weight")) {
      for (size_t i = 0; i < p.numel(); ++i) dst[i] = 1.0f;
      continue;
    }
    if (p.ndim < 2 || ends_with(p.name, ".bias")) continue;  // biases start at zero
    float std = 0.02f;
    if (ends_with(p.name, "c_proj.weight")) std = 0.02f / std::sqrt(2.0f * float(m.n_layer));
    uint64_t key = stream_key(seed, p.name);
    for (const ShardBlock& b : layout.blocks(p)) {
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < b.rows; ++r) {
        float* row = dst + (b.lrow + r) * p.lcols + b.lcol;
        uint64_t g = uint64_t(b.grow + r) * uint64_t(p.cols) + uint64_t(b.gcol);
        for (int64_t c = 0; c < b.cols; ++c) row[c] = std * normal01(key, g + uint64_t(c));
      }
    }
  }
}

}  // namespace loom
