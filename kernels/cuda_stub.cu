// Anchor translation unit of the cuda kernel library: reports the CUDA runtime version compiled in.
#include <cuda_runtime.h>

namespace loom::cuda {
int runtime_version_compiled() { return CUDART_VERSION; }
}  // namespace loom::cuda
