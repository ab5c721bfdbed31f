// Collective error agreement and config loading at start-up.
#include "train/startup.h"

#include <mpi.h>

#include <cstdio>
#include <exception>

#include "core/check.h"

namespace loom {

void collectively(const std::function<void()>& f, MPI_Comm comm) {
  std::string msg;
  try {
    f();
  } catch (const ReportedError&) {
    msg = "\x01";  // already printed by this rank
  } catch (const std::exception& e) {
    msg = e.what();
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  int mine = msg.empty() ? world : rank, first = world;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == world) return;
  if (rank == first && msg != "\x01") {
    std::string line = "loom: error: " + msg + "\n";
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }
  throw ReportedError{};
}

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
  if (cfg.parallel.dp == 0) cfg.parallel.dp = world / (cfg.parallel.tp * cfg.parallel.pp);
  return cfg;
}

}  // namespace loom
