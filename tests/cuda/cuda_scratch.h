// Device scratch for the cuda kernel tests that pass a Workspace (as the backend passes its
// GemmHandle's workspace): one 32 MiB buffer for the whole process.
#pragma once
#include "kernels/matmul.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {

inline cuda::Workspace test_scratch() {
  // Never freed: the process's end releases it (no destructor racing the runtime's teardown).
  static DevBuf<char>* buf = new DevBuf<char>(cuda::GemmHandle::kDefaultWorkspaceBytes);
  return cuda::Workspace{buf->get(), buf->size()};
}

}  // namespace loom::cudatest
