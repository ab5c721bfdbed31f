// Thread configuration of the cpu backend.
#include "backend/cpu_threads.h"

#include <cblas.h>
#include <omp.h>
#include <pmmintrin.h>
#include <xmmintrin.h>

#include <cstdlib>
#include <thread>

namespace loom {

int default_num_threads(int local_ranks) {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  int cores = int(std::thread::hardware_concurrency());
  if (cores <= 0) cores = 1;
  int n = cores / (local_ranks > 0 ? local_ranks : 1);
  return n > 0 ? n : 1;
}

void configure_cpu_threads(int num_threads) {
  omp_set_num_threads(num_threads);
  // OpenBLAS's OpenMP build follows omp_set_num_threads; a pthreads build keeps its own pool,
  // sized from the cores at load time: size it too, so ranks sharing a node never oversubscribe.
  openblas_set_num_threads(num_threads);
  // Denormals make fp32 math on tiny gradients tens of times slower; flush them on every thread.
#pragma omp parallel
  {
    _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
    _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
  }
}

}  // namespace loom
