// Loads libcublasLt and libcublas on first use (dlopen) and resolves the functions loom calls.
#include <string>

#include "kernels/cublas_api.cuh"
#include "kernels/cuda_check.h"

#ifndef LOOM_CUDA_EMULATE
#include <dlfcn.h>
#endif

#define LOOM_STR2(x) #x
#define LOOM_STR(x) LOOM_STR2(x)

namespace loom::cuda {

#ifndef LOOM_CUDA_EMULATE
void* detail::open_library(const char* soname) {
  if (void* h = dlopen(soname, RTLD_NOW | RTLD_GLOBAL)) return h;
  std::string first = dlerror();
#ifdef LOOM_CUDA_LIBRARY_DIR
  const std::string path = std::string(LOOM_CUDA_LIBRARY_DIR) + "/" + soname;
  if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) return h;
  first += "; " + std::string(dlerror());
#endif
  throw CudaError(std::string("cannot load ") + soname + " (loom was built with cuBLAS " +
                  LOOM_STR(CUBLAS_VER_MAJOR) + "): " + first +
                  "; install the CUDA toolkit's cuBLAS or add its lib directory to "
                  "LD_LIBRARY_PATH");
}
#else
void* detail::open_library(const char*) { return nullptr; }
#endif

namespace {

// The sonames of the toolkit loom was compiled against (libcublasLt.so.13 with CUDA 13).
constexpr const char* kCublasLtSoname = "libcublasLt.so." LOOM_STR(CUBLAS_VER_MAJOR);
constexpr const char* kCublasSoname = "libcublas.so." LOOM_STR(CUBLAS_VER_MAJOR);

#ifndef LOOM_CUDA_EMULATE
template <typename F>
void resolve(void* lib, const char* soname, const char* name, F& fn) {
  dlerror();
  void* p = dlsym(lib, name);
  if (!p)
    throw CudaError(std::string("cannot find ") + name + " in " + soname + ": " + dlerror() +
                    "; the library is older than the CUDA headers loom was built with");
  fn = reinterpret_cast<F>(p);
}
#define LOOM_RESOLVE(f) resolve(lib, soname, #f, api.f);
#else
#define LOOM_RESOLVE(f) api.f = &::f;
#endif

CublasLtApi load_cublaslt(const char* soname) {
  CublasLtApi api;
  [[maybe_unused]] void* lib = detail::open_library(soname);
  LOOM_CUBLASLT_FUNCTIONS(LOOM_RESOLVE)
  return api;
}

CublasApi load_cublas(const char* soname) {
  CublasApi api;
  [[maybe_unused]] void* lib = detail::open_library(soname);
  LOOM_CUBLAS_FUNCTIONS(LOOM_RESOLVE)
  return api;
}
#undef LOOM_RESOLVE

}  // namespace

// Function-local statics: initialised once, under the compiler's guard; a throw leaves them
// uninitialised, so a later call tries again (and throws the same clear error).
const CublasLtApi& cublaslt() {
  static const CublasLtApi api = load_cublaslt(kCublasLtSoname);
  return api;
}

const CublasApi& cublas() {
  static const CublasApi api = load_cublas(kCublasSoname);
  return api;
}

}  // namespace loom::cuda
