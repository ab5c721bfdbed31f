// The CPU emulator of the cuda sources checks itself: planted bugs (an off-by-one index, a missing
// __syncthreads, a wrong leading dimension, ...) in small kernels written here must be caught,
// and barriers, shuffles and votes must behave as on a GPU.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda_common.cuh"
#include "kernels/gelu.h"
#include "kernels/matmul.h"
#include "loom_emu/emulator.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace {

using loom::cuda::kFullMask;

// A fault was recorded, its report names `kernel` and contains `what`; then the device is
// usable again.
void expect_fault(cudaError_t want, const std::string& kernel, const std::string& what) {
  EXPECT_EQ(cudaDeviceSynchronize(), want);
  const std::string r = loom_emu::fault_report();
  EXPECT_NE(r.find(kernel), std::string::npos) << r;
  EXPECT_NE(r.find(what), std::string::npos) << r;
  loom_emu::clear_fault();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

void expect_clean() {
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << loom_emu::fault_report();
  loom_emu::clear_fault();
}

// ---- guard zones: an off-by-one index ---------------------------------------------------------
__global__ void copy_kernel(float* out, const float* in, int n, int extra) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n + extra) out[i] = in[i < n ? i : 0];  // extra = 1: the classic i <= n
}

TEST(Emulator, OffByOneWriteIsCaught) {
  const int n = 1000;
  DevBuf<float> in(randu(n, 1)), out(n);
  LOOM_LAUNCH(copy_kernel, 4, 256, 0, nullptr)(out.get(), in.get(), n, 0);
  expect_clean();
  LOOM_LAUNCH(copy_kernel, 4, 256, 0, nullptr)(out.get(), in.get(), n, 1);
  expect_fault(cudaErrorIllegalAddress, "copy_kernel", "out-of-bounds 4-byte write at 0x");
}

__global__ void read_before_kernel(float* out, const float* in) {
  out[threadIdx.x] = in[(int)threadIdx.x - 1];  // thread 0 reads in[-1]
}

TEST(Emulator, ReadBeforeTheStartIsCaught) {
  DevBuf<float> in(randu(32, 2)), out(32);
  LOOM_LAUNCH(read_before_kernel, 1, 32, 0, nullptr)(out.get(), in.get());
  expect_fault(cudaErrorIllegalAddress, "read_before_kernel", "4 bytes before the start");
}

TEST(Emulator, UseAfterFreeAndHostPointersAreCaught) {
  std::vector<float> host(64, 1.0f);
  DevBuf<float> out(64);
  LOOM_LAUNCH(copy_kernel, 1, 64, 0, nullptr)(out.get(), host.data(), 64, 0);
  expect_fault(cudaErrorIllegalAddress, "copy_kernel", "not device memory");
  float* freed = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&freed), 64 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaFree(freed), cudaSuccess);
  LOOM_LAUNCH(copy_kernel, 1, 64, 0, nullptr)(out.get(), freed, 64, 0);
  expect_fault(cudaErrorIllegalAddress, "copy_kernel", "not device memory");
  EXPECT_EQ(cudaFree(freed), cudaErrorInvalidValue) << "double free";
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
}

// Next to a GPU, host code that dereferences a device pointer crashes; here too, with a message
// (device memory is accessible only while device work runs).
TEST(EmulatorDeathTest, HostDereferenceOfDevicePointerCrashes) {
  DevBuf<float> d(randu(16, 9));
  float* p = d.get();
  EXPECT_DEATH({ std::printf("%f\n", static_cast<volatile float*>(p)[3]); },
               "host code dereferenced device memory");
}

// ---- alignment: a 128-bit access must be 16-byte aligned -------------------------------------
__global__ void load4_kernel(float4* out, const float* in) {
  out[threadIdx.x] = reinterpret_cast<const float4*>(in)[threadIdx.x];
}

TEST(Emulator, MisalignedVectorAccessIsCaught) {
  DevBuf<float> in(randu(4 * 33, 3));
  DevBuf<float4> out(32);
  LOOM_LAUNCH(load4_kernel, 1, 32, 0, nullptr)(out.get(), in.get());
  expect_clean();
  LOOM_LAUNCH(load4_kernel, 1, 32, 0, nullptr)(out.get(), in.get() + 1);
  expect_fault(cudaErrorMisalignedAddress, "load4_kernel", "misaligned 16-byte read");
}

// ---- races: a missing __syncthreads -------------------------------------------------------------
// out[t] = in[t + 1] through shared memory: each thread reads a word another thread wrote.
template <bool kSync>
__global__ void shift_kernel(float* out, const float* in) {
  __shared__ float tile[256];
  const int t = threadIdx.x;
  tile[t] = in[blockIdx.x * 256 + t];
  if (kSync) __syncthreads();
  out[blockIdx.x * 256 + t] = tile[(t + 1) % 256];
}

TEST(Emulator, MissingSyncthreadsIsCaught) {
  const auto x = randu(512, 4);
  DevBuf<float> in(x), out(512);
  LOOM_LAUNCH(shift_kernel<true>, 2, 256, 0, nullptr)(out.get(), in.get());
  expect_clean();
  const auto got = out.download();
  for (int i = 0; i < 512; i++) ASSERT_EQ(got[i], x[(i / 256) * 256 + (i + 1) % 256]) << i;
  LOOM_LAUNCH(shift_kernel<false>, 2, 256, 0, nullptr)(out.get(), in.get());
  expect_fault(cudaErrorLaunchFailure, "shift_kernel<false>", "shared-memory race");
}

// The write-after-read twin: the tile is overwritten while another thread may still read it.
__global__ void reuse_kernel(float* out, const float* in, int rounds) {
  __shared__ float tile[64];
  float acc = 0.0f;
  for (int r = 0; r < rounds; r++) {
    tile[threadIdx.x] = in[r * 64 + threadIdx.x];  // no barrier before the rewrite
    __syncthreads();
    acc += tile[63 - threadIdx.x];
  }
  out[threadIdx.x] = acc;
}

TEST(Emulator, RewriteBeforeOthersReadIsCaught) {
  DevBuf<float> in(randu(64 * 2, 5)), out(64);
  LOOM_LAUNCH(reuse_kernel, 1, 64, 0, nullptr)(out.get(), in.get(), 1);
  expect_clean();
  LOOM_LAUNCH(reuse_kernel, 1, 64, 0, nullptr)(out.get(), in.get(), 2);
  expect_fault(cudaErrorLaunchFailure, "reuse_kernel", "shared-memory race");
}

__global__ void uninit_kernel(float* out) {
  __shared__ float s[32];
  if (threadIdx.x < 16) s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];  // words 16..31 were never written by this block
}

TEST(Emulator, UninitializedSharedReadIsCaught) {
  DevBuf<float> out(32);
  LOOM_LAUNCH(uninit_kernel, 1, 32, 0, nullptr)(out.get());
  expect_fault(cudaErrorLaunchFailure, "uninit_kernel", "uninitialized shared memory");
}

// ---- global-memory races: blocks are not ordered ---------------------------------------------
// sum[0] += x over the grid without atomics: every block reads and writes the same word.
__global__ void grid_sum_kernel(float* sum, const float* x) {
  if (threadIdx.x == 0) sum[0] += x[blockIdx.x];
}

// Each block writes its own partial; adjacent 2-byte elements belong to different threads.
__global__ void partials_kernel(float* partial, __half* h, const float* x) {
  if (threadIdx.x == 0) partial[blockIdx.x] = x[blockIdx.x];
  h[blockIdx.x * blockDim.x + threadIdx.x] = __float2half_rn(1.0f);
}

// Thread 0 writes, the others read, in global memory: ordered only with the barrier.
template <bool kSync>
__global__ void publish_kernel(float* out, float* flag) {
  if (threadIdx.x == 0) flag[blockIdx.x] = 1.0f;
  if (kSync) __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = flag[blockIdx.x];
}

TEST(Emulator, GlobalMemoryRacesAreCaught) {
  DevBuf<float> x(randu(8, 10)), sum(1), partial(8), out(8 * 64), flag(8);
  DevBuf<__half> h(8 * 64);
  LOOM_LAUNCH(partials_kernel, 8, 64, 0, nullptr)(partial.get(), h.get(), x.get());
  expect_clean();
  LOOM_LAUNCH(grid_sum_kernel, 1, 32, 0, nullptr)(sum.get(), x.get());
  expect_clean();  // one block: no race
  LOOM_LAUNCH(grid_sum_kernel, 8, 32, 0, nullptr)(sum.get(), x.get());
  expect_fault(cudaErrorLaunchFailure, "grid_sum_kernel", "global-memory race");
  LOOM_LAUNCH(publish_kernel<true>, 8, 64, 0, nullptr)(out.get(), flag.get());
  expect_clean();
  LOOM_LAUNCH(publish_kernel<false>, 8, 64, 0, nullptr)(out.get(), flag.get());
  expect_fault(cudaErrorLaunchFailure, "publish_kernel<false>", "global-memory race");
}

// ---- barriers and warps behave as on a GPU -----------------------------------------------------
// The last thread writes, everyone reads after the barrier: run-to-completion threads (no real
// barrier) would read before the write.
__global__ void barrier_kernel(int* out) {
  __shared__ int v;
  if (threadIdx.x == blockDim.x - 1) v = 42 + (int)blockIdx.x;
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
  const int any = __syncthreads_or(threadIdx.x == 7);
  const int count = __syncthreads_count(threadIdx.x % 3 == 0);
  if (threadIdx.x == 0) out[gridDim.x * blockDim.x + blockIdx.x * 2] = any;
  if (threadIdx.x == 0) out[gridDim.x * blockDim.x + blockIdx.x * 2 + 1] = count;
}

TEST(Emulator, BarriersWaitForTheWholeBlock) {
  const int blocks = 3, threads = 96;
  DevBuf<int> out(blocks * threads + 2 * blocks);
  LOOM_LAUNCH(barrier_kernel, blocks, threads, 0, nullptr)(out.get());
  const auto got = out.download();
  for (int b = 0; b < blocks; b++) {
    for (int t = 0; t < threads; t++) ASSERT_EQ(got[b * threads + t], 42 + b);
    EXPECT_EQ(got[blocks * threads + 2 * b], 1) << "__syncthreads_or";
    EXPECT_EQ(got[blocks * threads + 2 * b + 1], 32) << "__syncthreads_count";
  }
}

__global__ void warp_kernel(float* sums, int* lanes, unsigned* ballots) {
  const int lane = threadIdx.x & 31;
  float v = (float)threadIdx.x;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);  // butterfly sum
  sums[threadIdx.x] = v;
  lanes[threadIdx.x * 3] = __shfl_sync(kFullMask, (int)threadIdx.x, 5);           // broadcast
  lanes[threadIdx.x * 3 + 1] = __shfl_down_sync(kFullMask, (int)threadIdx.x, 3);  // lane + 3
  lanes[threadIdx.x * 3 + 2] = __shfl_up_sync(kFullMask, (int)threadIdx.x, 2);    // lane - 2
  const unsigned b = __ballot_sync(kFullMask, lane % 4 == 1);
  if (lane == 0) ballots[threadIdx.x / 32] = b;
}

TEST(Emulator, ShufflesAndVotesExchangeAcrossTheWarp) {
  DevBuf<float> sums(64);
  DevBuf<int> lanes(64 * 3);
  DevBuf<unsigned> ballots(2);
  LOOM_LAUNCH(warp_kernel, 1, 64, 0, nullptr)(sums.get(), lanes.get(), ballots.get());
  const auto s = sums.download();
  const auto l = lanes.download();
  const auto b = ballots.download();
  for (int t = 0; t < 64; t++) {
    const int w = t / 32, lane = t % 32;
    EXPECT_EQ(s[t], (float)(32 * 31 / 2 + 32 * 32 * w)) << t;
    EXPECT_EQ(l[t * 3], 32 * w + 5) << t;
    EXPECT_EQ(l[t * 3 + 1], lane + 3 < 32 ? t + 3 : t) << t;
    EXPECT_EQ(l[t * 3 + 2], lane >= 2 ? t - 2 : t) << t;
  }
  EXPECT_EQ(b[0], 0x22222222u);
  EXPECT_EQ(b[1], 0x22222222u);
}

__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 16) return;  // these threads never reach the barrier below
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

__global__ void divergent_shuffle_kernel(float* out) {
  float v = 1.0f;
  if (threadIdx.x & 1) v = __shfl_xor_sync(kFullMask, v, 1);  // half the warp
  out[threadIdx.x] = v;
}

TEST(Emulator, BarriersAndShufflesNotReachedByAllAreCaught) {
  DevBuf<float> out(64);
  LOOM_LAUNCH(divergent_barrier_kernel, 1, 64, 0, nullptr)(out.get());
  expect_fault(cudaErrorLaunchFailure, "divergent_barrier_kernel", "exited");
  LOOM_LAUNCH(divergent_shuffle_kernel, 1, 64, 0, nullptr)(out.get());
  expect_fault(cudaErrorLaunchFailure, "divergent_shuffle_kernel", "warp intrinsic");
}

TEST(Emulator, BadLaunchConfigurationIsALaunchError) {
  DevBuf<float> out(64);
  LOOM_LAUNCH(copy_kernel, 1, 2048, 0, nullptr)(out.get(), out.get(), 64, 0);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "not sticky";
  LOOM_LAUNCH(copy_kernel, 0, 64, 0, nullptr)(out.get(), out.get(), 64, 0);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration) << "an empty grid";
}

TEST(Emulator, AccessesAreChecked) {
  const loom_emu::Stats before = loom_emu::stats();
  DevBuf<float> in(randu(512, 6)), out(512);
  LOOM_LAUNCH(shift_kernel<true>, 2, 256, 0, nullptr)(out.get(), in.get());
  expect_clean();
  const loom_emu::Stats after = loom_emu::stats();
  EXPECT_EQ(after.kernels - before.kernels, 1u);
  EXPECT_EQ(after.threads - before.threads, 512u);
  EXPECT_EQ(after.device_accesses - before.device_accesses, 1024u) << "one read, one write";
  EXPECT_EQ(after.shared_accesses - before.shared_accesses, 1024u);
  EXPECT_EQ(after.barriers - before.barriers, 512u);
}

// ---- cuBLASLt: a wrong leading dimension --------------------------------------------------------
// The row-major GEMM of kernels/matmul.cu against the cpu twin, with A's leading dimension as
// given to the device (lda_dev) and as the data is laid out (lda).
double gemm_error(int lda, int lda_dev, size_t alloc_floats) {
  cuda::GemmHandle h(0);
  const int M = 20, N = 24, K = 16, ldb = N, ldc = N;
  auto A = randu(alloc_floats, 7), B = randu((size_t)K * ldb, 8);
  std::vector<float> C((size_t)M * ldc, 0.0f);
  cpu::gemm(false, false, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), ldc);
  DevBuf<float> dA(A), dB(B), dC(C.size());
  cuda::gemm(h, false, false, M, N, K, 1.0f, dA.get(), lda_dev, dB.get(), ldb, 0.0f, dC.get(), ldc,
             nullptr);
  return rel_err(dC.download(), C);
}

TEST(Emulator, WrongLeadingDimensionFailsTheGemmCheck) {
  const int M = 20, K = 16;
  EXPECT_LE(gemm_error(K, K, (size_t)M * K), kTolF32) << "the right lda";
  // lda 17 for rows of 16: every row after the first is read shifted (inside the buffer).
  EXPECT_GT(gemm_error(K, K + 1, (size_t)M * (K + 1)), 0.1);
  // lda 32 for rows of 16: the GEMM would read past the end of A: a fault naming the operand.
  EXPECT_THROW(gemm_error(K, 2 * K, (size_t)M * K), std::runtime_error);
  const std::string r = loom_emu::fault_report();
  EXPECT_NE(r.find("cublasLtMatmul"), std::string::npos) << r;
  EXPECT_NE(r.find("beyond its allocation"), std::string::npos) << r;
  loom_emu::clear_fault();
}

// matmul_forward's paths for when cuBLASLt has no epilogue algorithm (a bias broadcast then a
// beta = 1 GEMM; GELU unfused) and for OC not a multiple of 8 (no GELU aux), against the cpu twin.
TEST(Emulator, MatmulFallbackPathsMatchCpu) {
  const int N = 20, IC = 32;
  for (bool epilogues : {true, false})
    for (int OC : {48, 42}) {
      // A fresh handle: a handle keeps cuBLASLt's answer per GEMM key (a real cuBLASLt's does
      // not change within a process), so it would not see the switch below.
      cuda::GemmHandle h(0);
      loom_emu::set_cublaslt_epilogues(epilogues);
      const std::string what =
          std::string(epilogues ? "epilogues" : "no epilogues") + " OC=" + std::to_string(OC);
      auto x = randu((size_t)N * IC, 11), w = randu((size_t)IC * OC, 12), b = randu(OC, 13);
      std::vector<float> y((size_t)N * OC), act(y.size());
      cpu::matmul_forward(y.data(), x.data(), w.data(), b.data(), N, IC, OC);
      cpu::gelu_forward(act.data(), y.data(), y.size());
      DevBuf<float> dX(x), dW(w), dB(b), dY(y.size()), dPre(y.size());
      const uint64_t kernels = loom_emu::stats().kernels;
      cuda::matmul_forward(h, dY.get(), dX.get(), dW.get(), dB.get(), N, IC, OC, nullptr, nullptr);
      EXPECT_EQ(loom_emu::stats().kernels - kernels, epilogues ? 0u : 1u) << "bias broadcast";
      EXPECT_REL_LE(dY.download(), y, kTolF32, "bias " + what);
      cuda::matmul_forward(h, dY.get(), dX.get(), dW.get(), dB.get(), N, IC, OC, dPre.get(),
                           nullptr);
      EXPECT_REL_LE(dPre.download(), y, kTolF32, "pre-GELU " + what);
      EXPECT_REL_LE(dY.download(), act, kTolF32, "GELU " + what);
      auto xb = round_to<bf16>(x), wb = round_to<bf16>(w), bb = round_to<bf16>(b);
      std::vector<float> yb(y.size());
      cpu::matmul_forward(yb.data(), xb.data(), wb.data(), bb.data(), N, IC, OC);
      DevBuf<bf16> hX(convert<bf16>(xb)), hW(convert<bf16>(wb)), hB(convert<bf16>(bb)),
          hY(y.size());
      cuda::matmul_forward(h, hY.get(), hX.get(), hW.get(), hB.get(), N, IC, OC, nullptr, nullptr);
      EXPECT_REL_LE(to_f32(hY.download()), yb, kTolBF16, "bf16 bias " + what);
    }
  loom_emu::set_cublaslt_epilogues(true);
}

TEST(Emulator, CublasLtRefusesWhatItDoesNotImplement) {
  cublasLtMatmulDesc_t d = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const int32_t mode = 1;  // device pointer mode
  EXPECT_EQ(
      cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof(mode)),
      CUBLAS_STATUS_NOT_SUPPORTED);
  const cublasLtEpilogue_t relu = CUBLASLT_EPILOGUE_RELU;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu, sizeof(relu)),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t l = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 8, 8, 8), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreference_t p = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&p), CUBLAS_STATUS_SUCCESS);
  cublasLtHandle_t h = nullptr;
  ASSERT_EQ(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t r{};
  int found = -1;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(h, d, l, l, l, l, p, 1, &r, &found),
            CUBLAS_STATUS_NOT_SUPPORTED)
      << "RELU is not emulated";
  EXPECT_EQ(found, 0);
  EXPECT_EQ(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_16F, CUDA_R_16F),
            CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtDestroy(h);
  cublasLtMatmulPreferenceDestroy(p);
  cublasLtMatrixLayoutDestroy(l);
}

// ---- bf16 / fp16: the toolkit's conversions (used by the emulated kernels) equal loom's ----
TEST(Emulator, ToolkitConversionsEqualLoomsHostConversions) {
  // Every float whose bits 17..22 of the mantissa are one of a few patterns (0, 1, 2, 3, all
  // ones: carries) with every sign, exponent and 17 low bits (guard, sticky and last bits of both
  // roundings): 5 * 512 * 2^17 values.
  size_t bad_bf16 = 0, bad_f16 = 0;
  for (uint32_t hi : {0u, 1u, 2u, 3u, 0x3fu})
    for (uint32_t se = 0; se < 512; se++)
      for (uint32_t lo = 0; lo < (1u << 17); lo++) {
        const uint32_t u = (se << 23) | (hi << 17) | lo;
        float f;
        std::memcpy(&f, &u, 4);
        const __nv_bfloat16 b = __float2bfloat16_rn(f);
        const __half h = __float2half_rn(f);
        uint16_t bb, hb;
        std::memcpy(&bb, &b, 2);
        std::memcpy(&hb, &h, 2);
        const bool nan = std::isnan(f);
        bad_bf16 += nan ? !std::isnan(__bfloat162float(b)) : bb != cuda::bf16_from_float(f).bits;
        bad_f16 += nan ? !std::isnan(__half2float(h)) : hb != cuda::f16_from_float(f).bits;
      }
  EXPECT_EQ(bad_bf16, 0u);
  EXPECT_EQ(bad_f16, 0u);
  size_t bad_back = 0;
  for (uint32_t v = 0; v < 65536; v++) {
    const uint16_t bits = (uint16_t)v;
    __nv_bfloat16_raw rb;
    __half_raw rh;
    rb.x = rh.x = bits;
    const float fb = __bfloat162float(__nv_bfloat16(rb)), fh = __half2float(__half(rh));
    const float lb = cuda::bf16_to_float(cuda::bf16{bits}),
                lh = cuda::f16_to_float(cuda::f16{bits});
    // NaN in, NaN out (the toolkit's host path does not keep fp16 NaN payloads; loom's does).
    if (std::isnan(lb) || std::isnan(lh)) {
      bad_back += std::isnan(lb) != std::isnan(fb) || std::isnan(lh) != std::isnan(fh);
      continue;
    }
    bad_back += std::memcmp(&fb, &lb, 4) != 0 || std::memcmp(&fh, &lh, 4) != 0;
  }
  EXPECT_EQ(bad_back, 0u);
}

}  // namespace
}  // namespace loom::cudatest
