// Test support: MPI for tests that need it (lazy in unit tests, eager in mpi tests).
#pragma once

namespace loom::test {

// Initializes MPI once (a singleton world of size 1 outside mpirun); finalized at exit.
void ensure_mpi();
int world_rank();
int world_size();

}  // namespace loom::test
