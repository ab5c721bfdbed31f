// Layout, tiling and shape checks of the CUDA-core attention kernels (included by attention.cu).
#pragma once
#include <cstddef>
#include <type_traits>

#include "kernels/cuda_common.cuh"

namespace loom::cuda {
namespace {

// Layout: qkv (B, T, (NH + 2*NKV) * D), blocks of q heads (C = NH*D columns), k heads and v heads
// (NKV*D columns each), head h at columns [h*D, (h+1)*D) of its block; query head h reads kv head
// h / (NH / NKV).
// A warp works on one query (or key) row at a time; lane j of the warp takes key (or query) j of
// a 32-wide tile for the dot products, and output dimensions d = lane + 32 e for accumulation.
// Shared tiles whose rows are read by different lanes at the same d are padded to D + 1 floats
// (conflict-free); tiles read as warp-wide broadcasts are not.
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kTile = 32;  // keys (forward, dQ) or queries (dK/dV) per shared tile

// Rows per warp: more reuse of a shared tile for small heads; shared memory stays < 48 KiB.
template <int D>
__host__ __device__ constexpr int rows_fwd() {
  return D <= 64 ? 4 : 2;
}
template <int D>
__host__ __device__ constexpr int rows_bwd() {
  return D <= 64 ? 4 : 1;
}

struct Dims {
  int B, T, C, NH, NKV;  // C = NH * D: the row of out and dout
  int row;               // qkv row: C + 2 * NKV * D
  // The (b, h) bases of q, k and v in qkv (row stride `row`).
  __device__ size_t q_off(int b, int h, int D) const { return ((size_t)b * T) * row + h * D; }
  __device__ size_t k_off(int b, int h, int D) const {
    return ((size_t)b * T) * row + C + (h / (NH / NKV)) * D;
  }
  __device__ size_t v_off(int b, int h, int D) const { return k_off(b, h, D) + (size_t)NKV * D; }
};

// Copies rows [r0, r0 + nrows) of one head's q, k or v (at head_base, row stride g.row) into a
// shared tile of row pitch P, as fp32; rows >= T become 0. All threads of the block call it.
template <int D, int P, typename T>
__device__ __forceinline__ void load_tile(float* dst, const T* head_base, int r0, int nrows,
                                          const Dims& g) {
  for (int i = threadIdx.x; i < nrows * D; i += kThreads) {
    const int r = i / D, d = i % D, t = r0 + r;
    dst[r * P + d] = t < g.T ? to_f32(head_base[(size_t)t * g.row + d]) : 0.0f;
  }
}

Dims check_dims(int B, int T, int NH, int NKV, int D) {
  LOOM_CUDA_REQUIRE(B > 0 && T > 0 && NH > 0 && NKV > 0 && NH % NKV == 0,
                    "attention: need B, T, NH, NKV > 0 and NKV dividing NH");
  LOOM_CUDA_REQUIRE(D == 16 || D == 32 || D == 64 || D == 128,
                    "attention: head size must be 16, 32, 64 or 128");
  LOOM_CUDA_REQUIRE((long long)B * NH <= 65535, "attention: B * NH must be <= 65535");
  return Dims{B, T, NH * D, NH, NKV, (NH + 2 * NKV) * D};
}

// f(std::integral_constant<int, D>{}) for the head size D (checked by check_dims).
template <typename F>
void by_head_size(int D, F&& f) {
  using std::integral_constant;
  D == 16   ? f(integral_constant<int, 16>{})
  : D == 32 ? f(integral_constant<int, 32>{})
  : D == 64 ? f(integral_constant<int, 64>{})
            : f(integral_constant<int, 128>{});
}

}  // namespace
}  // namespace loom::cuda
