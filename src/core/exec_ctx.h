// ExecCtx: where kernels run (device, stream, BLAS handle, scratch workspace), passed explicitly.
#pragma once
#include "core/buffer.h"

namespace loom {

struct ExecCtx {
  Device device = Device::CPU;
  int num_threads = 1;        // OpenMP threads of this rank (cpu backend)
  void* stream = nullptr;     // cudaStream_t on the cuda backend
  void* blas = nullptr;       // cublasLt handle on the cuda backend
  Buffer workspace;           // scratch reused by kernels that need it
};

// Threads per rank: OMP_NUM_THREADS if set, else cores of the node / ranks on the node.
int default_num_threads(int local_ranks);
// Applies the thread count to OpenMP and BLAS, and flushes denormals to zero on this thread.
void configure_cpu_threads(int num_threads);

}  // namespace loom
