// The emulated nvcuda::wmma (<mma.h>) and __syncwarp: mma_sync equals a reference GEMM of the
// 16-bit inputs, the layout is opaque, and misuse (divergent calls, bad ldm or pointers,
// missing __syncwarp) faults.
#include <gtest/gtest.h>
#include <mma.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda_common.cuh"
#include "loom_emu/emulator.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace {

using namespace nvcuda;

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

// ---- mma_sync against a reference GEMM ----------------------------------------------------------
// Warp w of the block computes D_w = A_w B_w + C_w: 16x16 tiles at element offset 16 w of
// row-major (A, C, D) or column-major (B) global arrays with leading dimension ld, loaded with
// the layouts named by the template arguments.
template <typename T, typename LA, typename LB, bool kRowC>
__global__ void mma_kernel(float* d, const T* a, const T* b, const float* c, int ld) {
  const int off = 16 * (threadIdx.x / 32);
  const int oa = std::is_same_v<LA, wmma::row_major> ? off : off * ld;
  const int ob = std::is_same_v<LB, wmma::row_major> ? off : off * ld, oc = kRowC ? off : off * ld;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::load_matrix_sync(fa, a + oa, ld);
  wmma::load_matrix_sync(fb, b + ob, ld);
  const wmma::layout_t lc = kRowC ? wmma::mem_row_major : wmma::mem_col_major;
  wmma::load_matrix_sync(fc, c + oc, ld, lc);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(d + oc, fc, ld, lc);
}

// Element (r, c) of a 16x16 tile at column offset off of an array with leading dimension ld.
size_t at(bool row, int r, int c, int off, int ld) {
  return row ? (size_t)r * ld + off + c : (size_t)(off + c) * ld + r;
}

template <typename H, typename T, typename LA, typename LB, bool kRowC>
void check_mma(uint32_t seed) {
  constexpr bool ra = std::is_same_v<LA, wmma::row_major>, rb = std::is_same_v<LB, wmma::row_major>;
  const int warps = 2, ld = 40;  // ld: a multiple of 8 and of 4, not of 16
  const size_t n = (size_t)16 * warps * ld + 64;
  const auto a = round_to<H>(randu(n, seed, -2.0f, 2.0f));
  const auto b = round_to<H>(randu(n, seed + 1, -2.0f, 2.0f));
  const auto c = randu(n, seed + 2, -4.0f, 4.0f);
  DevBuf<H> dA(convert<H>(a)), dB(convert<H>(b));
  DevBuf<float> dC(c), dD(std::vector<float>(n, 0.0f));
  LOOM_LAUNCH((mma_kernel<T, LA, LB, kRowC>), 1, 32 * warps, 0, nullptr)
  (dD.get(), reinterpret_cast<const T*>(dA.get()), reinterpret_cast<const T*>(dB.get()), dC.get(),
   ld);
  const auto got = dD.download();
  for (int w = 0; w < warps; w++)
    for (int i = 0; i < 16; i++)
      for (int j = 0; j < 16; j++) {
        // Exact: products of 16-bit values in double, the sum rounded once. Reference 2: a plain
        // fp32 loop, within its error bound |fl(sum) - sum| <= 17 u sum|terms| (u = 2^-24).
        const float cij = c[at(kRowC, i, j, 16 * w, ld)];
        double exact = cij, mag = std::fabs(cij);
        float f32 = cij;
        for (int k = 0; k < 16; k++) {
          const float x = a[at(ra, i, k, 16 * w, ld)], y = b[at(rb, k, j, 16 * w, ld)];
          exact += (double)x * y;
          mag += std::fabs((double)x * y);
          f32 += x * y;
        }
        const float g = got[at(kRowC, i, j, 16 * w, ld)];
        ASSERT_EQ(g, (float)exact) << "warp " << w << " (" << i << ", " << j << ")";
        ASSERT_LE(std::fabs((double)g - f32), 17 * std::ldexp(1.0, -24) * mag + 1e-30);
      }
}

TEST(EmulatorWmma, MmaEqualsReferenceGemmOfRoundedInputs) {
  check_mma<bf16, __nv_bfloat16, wmma::row_major, wmma::col_major, true>(11);
  check_mma<bf16, __nv_bfloat16, wmma::col_major, wmma::row_major, false>(12);
  check_mma<f16, __half, wmma::row_major, wmma::row_major, true>(13);
  check_mma<f16, __half, wmma::col_major, wmma::col_major, false>(14);
}

// ---- the layout is opaque ---------------------------------------------------------------------
// Each lane writes the index of its own x[i] into an accumulator and stores it; and loads the
// same row-major matrix into an A and an accumulator fragment, recording whether they agree.
__global__ void layout_kernel(float* stored, int* same, const __nv_bfloat16* ma, const float* mc) {
  const int lane = threadIdx.x;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  for (int i = 0; i < fc.num_elements; i++) fc.x[i] = (float)(lane * fc.num_elements + i);
  wmma::store_matrix_sync(stored, fc, 16, wmma::mem_row_major);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::load_matrix_sync(fa, ma, 16);
  wmma::load_matrix_sync(fc, mc, 16, wmma::mem_row_major);
  int agree = 1;
  for (int i = 0; i < fc.num_elements; i++) agree &= __bfloat162float(fa.x[i]) == fc.x[i];
  same[lane] = agree;
}

TEST(EmulatorWmma, FragmentLayoutIsAPermutationNotRowMajorLaneOrder) {
  std::vector<float> m(256);
  for (int i = 0; i < 256; i++) m[i] = (float)i;  // exact in bf16 up to 256
  DevBuf<float> stored(256), mc(m);
  DevBuf<bf16> ma(convert<bf16>(m));
  DevBuf<int> same(32);
  LOOM_LAUNCH(layout_kernel, 1, 32, 0, nullptr)
  (stored.get(), same.get(), reinterpret_cast<const __nv_bfloat16*>(ma.get()), mc.get());
  const auto s = stored.download();
  std::vector<int> seen(256, 0);
  int in_place = 0;
  for (int e = 0; e < 256; e++) {
    seen[(int)s[e]]++;
    in_place += s[e] == (float)e;
  }
  for (int v = 0; v < 256; v++) ASSERT_EQ(seen[v], 1) << "every element held by one lane";
  EXPECT_LT(in_place, 16) << "lane-major row order would put all 256 in place";
  int agree = 0;
  for (int x : same.download()) agree += x;
  EXPECT_LT(agree, 32) << "A and accumulator fragments must not share a layout";
}

// ---- misuse faults ---------------------------------------------------------------------------
// kBug 0: correct; 1: half the warp passes another pointer; 2: half the warp stores while the
// other half multiplies; 3: ldm 20 (not a multiple of 8); 4: a pointer 16 bytes off 32-byte
// alignment; 5: a float ldm of 18 (not a multiple of 4).
template <int kBug>
__global__ void misuse_kernel(float* d, const __half* a) {
  const int lane = threadIdx.x & 31;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  const __half* pa = kBug == 1 && lane >= 16 ? a + 256 : kBug == 4 ? a + 8 : a;
  wmma::load_matrix_sync(fa, pa, kBug == 3 ? 20 : 16);
  wmma::load_matrix_sync(fb, a, 16);
  if (kBug == 2 && lane < 16) {
    wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
  } else {
    wmma::mma_sync(fc, fa, fb, fc);
  }
  wmma::store_matrix_sync(d, fc, kBug == 5 ? 18 : 16, wmma::mem_row_major);
}

TEST(EmulatorWmma, DivergentCallsFault) {
  DevBuf<__half> a(1024);
  DevBuf<float> d(1024);
  LOOM_LAUNCH(misuse_kernel<0>, 1, 32, 0, nullptr)(d.get(), a.get());
  expect_clean();
  LOOM_LAUNCH(misuse_kernel<1>, 1, 32, 0, nullptr)(d.get(), a.get());
  expect_fault(cudaErrorLaunchFailure, "misuse_kernel<1>",
               "lanes of a warp pass different arguments");
  LOOM_LAUNCH(misuse_kernel<2>, 1, 32, 0, nullptr)(d.get(), a.get());
  expect_fault(cudaErrorLaunchFailure, "misuse_kernel<2>", "different warp intrinsics");
}

TEST(EmulatorWmma, BadLdmOrUnalignedPointerFaults) {
  DevBuf<__half> a(1024);
  DevBuf<float> d(1024);
  LOOM_LAUNCH(misuse_kernel<3>, 1, 32, 0, nullptr)(d.get(), a.get());
  expect_fault(cudaErrorLaunchFailure, "misuse_kernel<3>", "ldm 20 is not a multiple of 8");
  LOOM_LAUNCH(misuse_kernel<4>, 1, 32, 0, nullptr)(d.get(), a.get());
  expect_fault(cudaErrorMisalignedAddress, "misuse_kernel<4>", "not 256-bit (32-byte) aligned");
  LOOM_LAUNCH(misuse_kernel<5>, 1, 32, 0, nullptr)(d.get(), a.get());
  expect_fault(cudaErrorLaunchFailure, "misuse_kernel<5>", "ldm 18 is not a multiple of 4");
}

// A load reaching past its allocation: the lanes' element reads are checked like any access.
__global__ void oob_kernel(float* d, const __half* a) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::load_matrix_sync(fa, a, 16);  // 256 elements from a 240-element buffer
  d[threadIdx.x] = __half2float(fa.x[0]);
}

TEST(EmulatorWmma, LoadsAreBoundsChecked) {
  DevBuf<__half> a(240);
  DevBuf<float> d(32);
  LOOM_LAUNCH(oob_kernel, 1, 32, 0, nullptr)(d.get(), a.get());
  expect_fault(cudaErrorIllegalAddress, "oob_kernel", "out-of-bounds 2-byte read");
}

// ---- __syncwarp orders a warp's shared-memory exchange -----------------------------------------
// kMode 0: store_matrix_sync, __syncwarp, lanes read row lane / 2; 1: the same without
// __syncwarp (a race); 2: warp 1 reads warp 0's tile after only a __syncwarp (a race: other
// warps need __syncthreads).
template <int kMode>
__global__ void exchange_kernel(float* out, const float* c) {
  __shared__ __align__(32) float tile[2][16 * 16];
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
  wmma::store_matrix_sync(tile[w], fc, 16, wmma::mem_row_major);
  if (kMode != 1) __syncwarp();
  const float* row = tile[kMode == 2 ? 0 : w] + (lane / 2) * 16 + (lane & 1) * 8;
  float s = 0.0f;
  for (int k = 0; k < 8; k++) s += row[k];
  out[threadIdx.x] = s;
}

TEST(EmulatorWmma, SyncwarpOrdersOnlyItsOwnWarp) {
  std::vector<float> m(256);
  for (int i = 0; i < 256; i++) m[i] = (float)(i % 7);
  DevBuf<float> c(m), out(64);
  LOOM_LAUNCH(exchange_kernel<0>, 1, 64, 0, nullptr)(out.get(), c.get());
  const auto got = out.download();
  expect_clean();
  for (int t = 0; t < 64; t++) {
    float want = 0.0f;
    for (int k = 0; k < 8; k++) want += m[((t & 31) / 2) * 16 + (t & 1) * 8 + k];
    ASSERT_EQ(got[t], want) << t;
  }
  LOOM_LAUNCH(exchange_kernel<1>, 1, 64, 0, nullptr)(out.get(), c.get());
  expect_fault(cudaErrorLaunchFailure, "exchange_kernel<1>", "shared-memory race");
  LOOM_LAUNCH(exchange_kernel<2>, 1, 64, 0, nullptr)(out.get(), c.get());
  expect_fault(cudaErrorLaunchFailure, "exchange_kernel<2>", "shared-memory race");
}

}  // namespace
}  // namespace loom::cudatest
