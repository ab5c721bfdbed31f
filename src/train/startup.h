// Start-up helpers shared by loom's commands: collective error agreement, config loading.
#pragma once
#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "config/config.h"

namespace loom {

// Thrown after an error was already printed and every rank agreed to stop: exit non-zero.
struct ReportedError {
  int code = 1;
};

// Runs f on every rank of `comm`, then agrees: if any rank threw, the lowest such rank prints
// "loom: error: <message>" and every rank throws ReportedError. Use for work that may fail on
// some ranks only (files), so no rank hangs in a later collective.
void collectively(const std::function<void()>& f, MPI_Comm comm = MPI_COMM_WORLD);

// Reads and validates the config on every rank and resolves parallel.dp for `world` ranks.
// Errors: one line per problem on rank 0, then ReportedError on every rank.
Config load_and_validate(const std::string& path, const std::vector<std::string>& overrides,
                         int world);

}  // namespace loom
