// The emulated nvcuda::wmma (<mma.h>) and its runtime (runtime/wmma.cpp): which elements of a
// fragment each lane holds, and the warp-collective entry points.
#pragma once
#include "loom_emu/device_api.h"

namespace loom_emu {
namespace detail {

enum class WmmaUse { A = 0, B = 1, Acc = 2 };
constexpr int kWmmaElems = 8;  // elements per lane of a 16x16 fragment (256 / 32)

// Element i of lane `lane` of a fragment of use u is element (e / 16, e % 16) of its 16x16
// matrix (A: row m, column k; B: row k, column n; accumulator: row m, column n), with
// e = (mul * (8 lane + i) + add) mod 256: a bijection (mul is odd), and a different one per use,
// so that code relying on CUDA's register layout, or on A's and C's layouts agreeing, computes
// wrong results in the emulator.
constexpr int wmma_element(WmmaUse u, int lane, int i) {
  const int mul = u == WmmaUse::A ? 37 : u == WmmaUse::B ? 101 : 77;
  const int add = u == WmmaUse::A ? 11 : u == WmmaUse::B ? 53 : 5;
  return (mul * (kWmmaElems * lane + i) + add) & 255;
}

// load_matrix_sync / store_matrix_sync (op WmmaLoad or WmmaStore): checks what CUDA requires
// (p 256-bit aligned, ldm a multiple of 16 bytes' worth of elements, the same p, ldm and layout
// on every lane), waits for all 32 lanes of the warp, and returns the calling lane. A violation
// is a fault of the running kernel.
int wmma_access(WarpOp op, const void* p, unsigned ldm, int layout, int elem_bytes);

// mma_sync: a and b hold this lane's kWmmaElems elements of A and B (as floats), acc this lane's
// elements of C on entry and of D = A B + C on return. Waits for all 32 lanes of the warp.
void wmma_mma(const float* a, const float* b, float* acc);

}  // namespace detail
}  // namespace loom_emu
