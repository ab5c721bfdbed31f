// Re-executes the process with OPENBLAS_CORETYPE when OpenBLAS picked its generic kernels.
#include "backend/blas_setup.h"

#include <cblas.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>

extern "C" char* openblas_get_corename(void);

namespace loom {

const char* blas_core_name() { return openblas_get_corename(); }

bool is_dynamic_loader(const char* path) {
  const char* slash = std::strrchr(path, '/');
  const char* base = slash ? slash + 1 : path;
  return std::strncmp(base, "ld-", 3) == 0 && std::strstr(base, ".so") != nullptr;
}

void ensure_fast_blas(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user (or we) chose already
  const char* core = openblas_get_corename();
  if (core == nullptr || std::strcmp(core, "Prescott") != 0) return;
  const char* better = nullptr;
  if (__builtin_cpu_supports("avx512f"))
    better = "SkylakeX";
  else if (__builtin_cpu_supports("avx2"))
    better = "Haswell";
  if (better == nullptr) return;
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return;
  self[n] = '\0';
  if (is_dynamic_loader(self)) return;  // started as `ld.so PROGRAM`: keep the slow kernels
  setenv("OPENBLAS_CORETYPE", better, 1);
  execv("/proc/self/exe", argv);  // returns only on failure: carry on with the slow kernels
}

}  // namespace loom
