// CUDA emulator: the warp-collective side of nvcuda::wmma (<mma.h>): argument checks of
// load_matrix_sync / store_matrix_sync, and mma_sync's exchange of fragments across the warp.
#include <sstream>
#include <vector>

#include "block.h"
#include "loom_emu/wmma_api.h"

namespace loom_emu::rt {
namespace {

struct Args {
  const void* p;
  unsigned ldm;
  int layout;
};

// What the lanes of one warp deposit for a collective call. Two of each, by the parity of the
// warp's exchange count (as the shuffles' values): a lane can be at most one call ahead of
// another, so a deposit never overwrites what a slower lane still reads.
struct WarpWmma {
  Args args[2][32];
  float a[2][256], b[2][256];  // A (m, k) and B (k, n), row-major
};

std::vector<WarpWmma>& warps() {
  static std::vector<WarpWmma> w;
  return w;
}

// The running thread's warp, its wmma deposits and the buffer of its next exchange.
struct Here {
  Block& b;
  Thread& t;
  WarpWmma& s;
  int buf;
};

Here here() {
  Block& b = *g_block;
  Thread& t = *g_thread;
  if (b.aborting) throw Abort{};
  std::vector<WarpWmma>& w = warps();
  if (w.size() < b.warps.size()) w.resize(b.warps.size());
  return Here{b, t, w[(size_t)t.warp], (int)(b.warps[(size_t)t.warp].gen & 1)};
}

std::string hex(const void* p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

[[noreturn]] void refuse(cudaError_t code, const std::string& what) {
  kernel_fault(code, what);
  throw Abort{};
}

}  // namespace
}  // namespace loom_emu::rt

namespace loom_emu::detail {

using namespace loom_emu::rt;

int wmma_access(WarpOp op, const void* p, unsigned ldm, int layout, int elem_bytes) {
  Here h = here();
  const std::string fn =
      op == WarpOp::WmmaLoad ? "wmma::load_matrix_sync" : "wmma::store_matrix_sync";
  const unsigned mult = 16u / (unsigned)elem_bytes;
  if (ldm % mult != 0)
    refuse(cudaErrorLaunchFailure, fn + ": ldm " + std::to_string(ldm) + " is not a multiple of " +
                                       std::to_string(mult) + " (CUDA requires a multiple of 8 " +
                                       "for 16-bit elements, of 4 for float)");
  if ((reinterpret_cast<uintptr_t>(p) & 31u) != 0)
    refuse(cudaErrorMisalignedAddress,
           fn + ": pointer " + hex(p) + " is not 256-bit (32-byte) aligned, as CUDA requires");
  h.s.args[h.buf][h.t.lane] = Args{p, ldm, layout};
  warp_exchange(op, 0xffffffffu, 0, 0, 32);
  const Args& mine = h.s.args[h.buf][h.t.lane];
  const Args& first = h.s.args[h.buf][0];
  if (mine.p != first.p || mine.ldm != first.ldm || mine.layout != first.layout)
    refuse(cudaErrorLaunchFailure,
           fn + ": the lanes of a warp pass different arguments (lane 0: pointer " + hex(first.p) +
               ", ldm " + std::to_string(first.ldm) + "; lane " + std::to_string(h.t.lane) +
               ": pointer " + hex(mine.p) + ", ldm " + std::to_string(mine.ldm) +
               "); CUDA requires the same pointer, ldm and layout on every lane");
  return h.t.lane;
}

void wmma_mma(const float* a, const float* b, float* acc) {
  Here h = here();
  float* A = h.s.a[h.buf];
  float* B = h.s.b[h.buf];
  for (int i = 0; i < kWmmaElems; i++) {
    A[wmma_element(WmmaUse::A, h.t.lane, i)] = a[i];
    B[wmma_element(WmmaUse::B, h.t.lane, i)] = b[i];
  }
  warp_exchange(WarpOp::WmmaMma, 0xffffffffu, 0, 0, 32);
  // Products of 16-bit floats are exact in double; the 17-term sum is rounded once to fp32.
  for (int i = 0; i < kWmmaElems; i++) {
    const int e = wmma_element(WmmaUse::Acc, h.t.lane, i), m = e / 16, n = e % 16;
    double sum = acc[i];
    for (int k = 0; k < 16; k++) sum += (double)A[m * 16 + k] * (double)B[k * 16 + n];
    acc[i] = (float)sum;
  }
}

}  // namespace loom_emu::detail
