// Start-up banner helpers: the resolved config written beside the metrics.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"
#include "parallel/parallel_ctx.h"
#include "train/console.h"

namespace loom {

// Writes to_yaml(cfg) to `path` (creating its directory); false with `error` set on failure.
bool write_resolved_config(const Config& cfg, const std::string& path, std::string* error);

}  // namespace loom
