// The emulator's stream capture and graphs: captured work runs only when the graph is launched,
// every launch runs it again on the memory's current contents, and a call that could wait for
// the device or allocate invalidates the capture (as CUDA's global capture mode refuses it).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda_common.cuh"
#include "kernels/matmul.h"
#include "loom_emu/emulator.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace {

__global__ void axpy_kernel(float* y, const float* x, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}

struct Stream {
  Stream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
  ~Stream() { cudaStreamDestroy(s); }
  cudaStream_t s = nullptr;
};

TEST(EmulatorGraph, CapturedWorkRunsAtEveryLaunchOnCurrentMemory) {
  const int n = 100;
  Stream st;
  DevBuf<float> x(std::vector<float>(n, 2.0f)), y(std::vector<float>(n, 1.0f));
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), n * sizeof(float)), cudaSuccess);
  for (int i = 0; i < n; ++i) pinned[i] = 10.0f;

  ASSERT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal), cudaSuccess);
  // x = pinned (a copy node reads the host memory at launch), then y += 0.5 x.
  ASSERT_EQ(cudaMemcpyAsync(x.get(), pinned, n * sizeof(float), cudaMemcpyHostToDevice, st.s),
            cudaSuccess);
  LOOM_LAUNCH(axpy_kernel, 1, 128, 0, st.s)(y.get(), x.get(), 0.5f, n);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(st.s, &g), cudaSuccess);
  EXPECT_EQ(y.download(), std::vector<float>(n, 1.0f)) << "nothing ran during the capture";

  cudaGraphExec_t e = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphDestroy(g), cudaSuccess);  // the exec keeps its own copy
  ASSERT_EQ(cudaGraphLaunch(e, st.s), cudaSuccess);
  EXPECT_EQ(y.download(), std::vector<float>(n, 6.0f));  // 1 + 0.5 x 10
  for (int i = 0; i < n; ++i) pinned[i] = 2.0f;          // new inputs for the next launch
  ASSERT_EQ(cudaGraphLaunch(e, st.s), cudaSuccess);
  EXPECT_EQ(y.download(), std::vector<float>(n, 7.0f));  // 6 + 0.5 x 2
  cudaGraphExecDestroy(e);
  cudaFreeHost(pinned);
}

TEST(EmulatorGraph, CapturedGemmEqualsTheDirectCall) {
  const int N = 8, IC = 32, OC = 48;
  Stream st;
  cuda::GemmHandle h(0);
  auto x = randu(size_t(N) * IC, 3), w = randu(size_t(IC) * OC, 4), b = randu(OC, 5);
  DevBuf<float> dX(x), dW(w), dB(b), want(size_t(N) * OC), got(size_t(N) * OC);
  cuda::matmul_forward(h, want.get(), dX.get(), dW.get(), dB.get(), N, IC, OC, nullptr, st.s);
  const auto direct = want.download();
  ASSERT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal), cudaSuccess);
  cuda::matmul_forward(h, got.get(), dX.get(), dW.get(), dB.get(), N, IC, OC, nullptr, st.s);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(st.s, &g), cudaSuccess);
  cudaGraphExec_t e = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
  const uint64_t gemms = loom_emu::stats().gemms;
  ASSERT_EQ(cudaGraphLaunch(e, st.s), cudaSuccess);
  EXPECT_EQ(loom_emu::stats().gemms - gemms, 1u) << "the GEMM ran at the launch";
  EXPECT_TRUE(bitwise_equal(got.download(), direct));
  cudaGraphExecDestroy(e);
  cudaGraphDestroy(g);
}

// Each call that may synchronize or allocate, made during a capture: refused, and the capture
// cannot be completed.
TEST(EmulatorGraph, SyncOrAllocationInsideACaptureInvalidatesIt) {
  Stream st;
  DevBuf<float> y(16);
  std::vector<float> host(16, 1.0f);
  cudaEvent_t ev = nullptr;
  ASSERT_EQ(cudaEventCreate(&ev), cudaSuccess);
  const std::vector<std::pair<std::string, std::function<cudaError_t()>>> calls = {
      {"cudaMalloc",
       [] {
         void* p = nullptr;
         return cudaMalloc(&p, 64);
       }},
      {"cudaStreamSynchronize", [&] { return cudaStreamSynchronize(st.s); }},
      {"cudaDeviceSynchronize", [] { return cudaDeviceSynchronize(); }},
      {"cudaMemcpy", [&] { return cudaMemcpy(y.get(), host.data(), 64, cudaMemcpyHostToDevice); }},
      {"pageable",
       [&] { return cudaMemcpyAsync(y.get(), host.data(), 64, cudaMemcpyHostToDevice, st.s); }},
      {"cudaEventSynchronize", [&] { return cudaEventSynchronize(ev); }},
  };
  for (const auto& [name, call] : calls) {
    ASSERT_EQ(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal), cudaSuccess) << name;
    LOOM_LAUNCH(axpy_kernel, 1, 32, 0, st.s)(y.get(), y.get(), 1.0f, 16);
    EXPECT_EQ(call(), cudaErrorStreamCaptureUnsupported) << name;
    cudaGraph_t g = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(st.s, &g), cudaErrorStreamCaptureInvalidated) << name;
    EXPECT_EQ(g, nullptr) << name;
    cudaGetLastError();
  }
  EXPECT_EQ(cudaStreamSynchronize(st.s), cudaSuccess) << "usable again after the capture";
  cudaEventDestroy(ev);
}

}  // namespace
}  // namespace loom::cudatest
