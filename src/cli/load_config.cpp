// load_and_validate: the config of a command, read on every rank, its problems printed once.
#include "cli/load_config.h"

#include <mpi.h>

#include <cstdio>

#include "parallel/collective.h"

namespace loom {

Config load_and_validate(const std::string& path, const std::vector<std::string>& overrides,
                         int world) {
  Config cfg;
  collectively([&] { cfg = load_config(path, overrides); });
  std::vector<std::string> errors = validate(cfg, world);
  if (!errors.empty()) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
      std::string out;
      for (const auto& e : errors) out += "loom: error: " + e + "\n";
      std::fputs(out.c_str(), stderr);
      std::fflush(stderr);
    }
    throw ReportedError{};
  }
  if (cfg.parallel.dp == 0)
    cfg.parallel.dp = world / (cfg.parallel.tp * cfg.parallel.pp * cfg.parallel.cp);
  return cfg;
}

}  // namespace loom
