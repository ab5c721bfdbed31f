// Threads of the cpu backend: how many per rank, applied to OpenMP and BLAS alike.
#pragma once

namespace loom {

// Threads per rank: OMP_NUM_THREADS if set, else cores of the node / ranks on the node.
int default_num_threads(int local_ranks);
// Applies the thread count to OpenMP and BLAS, and flushes denormals to zero on every thread.
void configure_cpu_threads(int num_threads);

}  // namespace loom
