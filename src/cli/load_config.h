// Loading the experiment config at start-up: every rank reads and validates, one report.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"

namespace loom {

// Reads and validates the config on every rank and resolves parallel.dp for `world` ranks.
// Errors: one line per problem on rank 0, then ReportedError on every rank.
Config load_and_validate(const std::string& path, const std::vector<std::string>& overrides,
                         int world);

}  // namespace loom
