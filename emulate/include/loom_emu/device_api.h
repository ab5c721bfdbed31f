// Declarations the CUDA emulator's device side and runtime share (no macros: the runtime uses
// the toolkit's names unchanged): thread coordinates, barriers, warp exchanges, atomics.
#pragma once
#include <cuda_runtime_api.h>  // the toolkit's: types, error codes, host API declarations
#include <vector_functions.h>  // make_float4, ...

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace loom_emu {
namespace detail {

// The running emulated thread's coordinates (set by the scheduler, read through the macros).
struct Coords {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
const Coords* coords();

// SyncWarp is __syncwarp; the Wmma ops are the warp-collective nvcuda::wmma calls (<mma.h>).
enum class WarpOp {
  ShflIdx,
  ShflXor,
  ShflDown,
  ShflUp,
  Ballot,
  Any,
  All,
  SyncWarp,
  WmmaLoad,
  WmmaStore,
  WmmaMma
};
// Block barrier; returns the reduction `op` (0 none, 1 or, 2 and, 3 count) of pred over the block.
int barrier(int op, int pred);
// Warp rendezvous: every lane of the warp named in mask must arrive. Shuffles return the bits
// of the source lane; votes return the ballot.
uint64_t warp_exchange(WarpOp op, unsigned mask, uint64_t bits, int arg, int width);

// Atomics: executed in the runtime (not instrumented), checked and recorded as atomic accesses.
int atomic_add(int* p, int v);
unsigned atomic_add(unsigned* p, unsigned v);
unsigned long long atomic_add(unsigned long long* p, unsigned long long v);
float atomic_add(float* p, float v);
double atomic_add(double* p, double v);
int atomic_max(int* p, int v);
unsigned atomic_max(unsigned* p, unsigned v);
int atomic_min(int* p, int v);
unsigned atomic_min(unsigned* p, unsigned v);
int atomic_exch(int* p, int v);
unsigned atomic_exch(unsigned* p, unsigned v);
float atomic_exch(float* p, float v);
int atomic_cas(int* p, int cmp, int v);
unsigned atomic_cas(unsigned* p, unsigned cmp, unsigned v);
unsigned long long atomic_cas(unsigned long long* p, unsigned long long cmp, unsigned long long v);

// Dynamic shared memory of the running block (extern __shared__ through LOOM_DYNAMIC_SHARED).
void* dynamic_shared();

template <typename T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp exchange of <= 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <typename T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

}  // namespace detail
}  // namespace loom_emu
