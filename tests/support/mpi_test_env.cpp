// Lazy MPI initialization for tests.
#include "tests/support/mpi_test_env.h"

#include <mpi.h>

#include <cstdlib>

namespace loom::test {

namespace {
void finalize_at_exit() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}
}  // namespace

void ensure_mpi() {
  int init = 0;
  MPI_Initialized(&init);
  if (init) return;
  int provided = MPI_THREAD_SINGLE;  // only the main thread calls MPI (as in src/main.cpp)
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  std::atexit(finalize_at_exit);
}

int world_rank() {
  ensure_mpi();
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  ensure_mpi();
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

}  // namespace loom::test
