// gtest main for tests run under mpirun: every rank runs every test, rank 0 prints, and the
// job fails when any rank fails.
#include <gtest/gtest.h>
#include <mpi.h>

#include "tests/support/mpi_test_env.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  loom::test::ensure_mpi();
  int rank = loom::test::world_rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (failed) fprintf(stderr, "rank %d: tests failed\n", rank);
  return any;
}
