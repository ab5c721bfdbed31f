// Start-up banner and end-of-run summary data: the grid mapping gathered over MPI to rank 0.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"
#include "parallel/parallel_ctx.h"
#include "train/console.h"

namespace loom {

// Every rank's host, coordinates and node-local rank, ordered by world rank, on world rank 0
// (empty on the others). Collective over pc.world.
std::vector<RankPlace> gather_rank_places(const ParallelCtx& pc);

// Writes to_yaml(cfg) to `path` (creating its directory); false with `error` set on failure.
bool write_resolved_config(const Config& cfg, const std::string& path, std::string* error);

}  // namespace loom
