// Watchdog probe: rank 0 enters an all-reduce that rank 1 never joins (it sleeps, then would
// exit cleanly). With the watchdog on, the job must end quickly with the diagnostic.
#include <mpi.h>
#include <unistd.h>

#include <cstdlib>

#include "parallel/comm.h"
#include "parallel/watchdog.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  loom::Comm world(MPI_COMM_WORLD, "world");
  loom::start_comm_watchdog(argc > 1 ? std::atof(argv[1]) : 2.0);
  if (world.rank() == 0) {
    float x = 1.0f;
    world.all_reduce(&x, 1, loom::ReduceOp::Sum);  // never completes
  } else {
    sleep(60);
  }
  MPI_Finalize();
  return 0;
}
