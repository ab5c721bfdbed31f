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
  MPI_Init(nullptr, nullptr);
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
