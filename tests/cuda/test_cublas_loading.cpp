// cuBLAS and cuBLASLt are loaded on first use: absent from a process that has not asked for them.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "kernels/cublas_api.cuh"

namespace {

// The shared objects mapped into this process (/proc/self/maps), one path per line.
std::string mapped_files() {
  std::ifstream in("/proc/self/maps");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool mapped(const std::string& soname_prefix) {
  return mapped_files().find("/" + soname_prefix) != std::string::npos;
}

// Needs no GPU: the libraries load and answer pure functions without a device.
TEST(CublasLoading, LibrariesLoadOnlyWhenFirstAsked) {
  // This binary links the cuda kernels and the loom library; linking must not load cuBLAS.
  ASSERT_FALSE(mapped("libcublasLt.so")) << "cuBLASLt was loaded before any cuda GEMM was made";
  ASSERT_FALSE(mapped("libcublas.so")) << "cuBLAS was loaded before any grouped GEMM was made";

  const loom::cuda::CublasLtApi& lt = loom::cuda::cublaslt();
#define LOOM_EXPECT_SET(f) EXPECT_NE(lt.f, nullptr) << #f;
  LOOM_CUBLASLT_FUNCTIONS(LOOM_EXPECT_SET)
#undef LOOM_EXPECT_SET
  EXPECT_TRUE(mapped("libcublasLt.so"));
  EXPECT_FALSE(mapped("libcublas.so")) << "cuBLASLt alone must not bring cuBLAS";
  // A call into the loaded library (pure: no device needed).
  EXPECT_STREQ(lt.cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
               "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_EQ(&loom::cuda::cublaslt(), &lt) << "loaded once";

  const loom::cuda::CublasApi& blas = loom::cuda::cublas();
#define LOOM_EXPECT_SET(f) EXPECT_NE(blas.f, nullptr) << #f;
  LOOM_CUBLAS_FUNCTIONS(LOOM_EXPECT_SET)
#undef LOOM_EXPECT_SET
  EXPECT_TRUE(mapped("libcublas.so"));
}

// A library that is nowhere: one error naming it and the fix, not a crash at the first GEMM.
TEST(CublasLoading, AMissingLibraryIsOneClearError) {
  try {
    loom::cuda::detail::open_library("libcublasLt.so.999");
    FAIL() << "opening a library that does not exist succeeded";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cannot load libcublasLt.so.999"), std::string::npos) << msg;
    EXPECT_NE(msg.find("LD_LIBRARY_PATH"), std::string::npos) << msg;
  }
}

}  // namespace
