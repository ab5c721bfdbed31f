// collectively(): run, agree on the first failing rank, print once, stop everywhere.
#include "parallel/collective.h"

#include <cstdio>
#include <exception>
#include <string>

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

}  // namespace loom
