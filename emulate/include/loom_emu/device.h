// The device side of the CUDA emulator: built-in indices, qualifiers, barriers, warp intrinsics,
// atomics and math, for .cu files compiled by the host compiler (LOOM_CUDA=EMULATE).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

// Qualifiers, defined before any toolkit header (crt/host_defines.h keeps definitions it finds).
// A __shared__ variable is a static: the blocks of a launch run one after another, so one
// instance per process is one instance per block. The checker tells shared accesses apart by
// address (the writable data of the module holding the kernel).
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __constant__ static

#include "loom_emu/device_api.h"

#undef __launch_bounds__
#define __launch_bounds__(...)
#define warpSize 32
#define threadIdx (::loom_emu::detail::coords()->thread_idx)
#define blockIdx (::loom_emu::detail::coords()->block_idx)
#define blockDim (::loom_emu::detail::coords()->block_dim)
#define gridDim (::loom_emu::detail::coords()->grid_dim)

inline void __syncthreads() { ::loom_emu::detail::barrier(0, 0); }
inline int __syncthreads_or(int p) { return ::loom_emu::detail::barrier(1, p); }
inline int __syncthreads_and(int p) { return ::loom_emu::detail::barrier(2, p); }
inline int __syncthreads_count(int p) { return ::loom_emu::detail::barrier(3, p); }

// A warp barrier that also orders the warp's shared-memory accesses before it against those
// after it (the race checks: lanes exchanging data through shared memory need it, as on a GPU).
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::loom_emu::detail::warp_exchange(::loom_emu::detail::WarpOp::SyncWarp, mask, 0, 0, warpSize);
}

template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = warpSize) {
  using namespace ::loom_emu::detail;
  return from_bits<T>(warp_exchange(WarpOp::ShflIdx, mask, to_bits(v), src, width));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  using namespace ::loom_emu::detail;
  return from_bits<T>(warp_exchange(WarpOp::ShflXor, mask, to_bits(v), lane_mask, width));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  using namespace ::loom_emu::detail;
  return from_bits<T>(warp_exchange(WarpOp::ShflDown, mask, to_bits(v), (int)delta, width));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  using namespace ::loom_emu::detail;
  return from_bits<T>(warp_exchange(WarpOp::ShflUp, mask, to_bits(v), (int)delta, width));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  using namespace ::loom_emu::detail;
  return (unsigned)warp_exchange(WarpOp::Ballot, mask, pred != 0, 0, warpSize);
}
inline int __any_sync(unsigned mask, int pred) {
  using namespace ::loom_emu::detail;
  return (int)warp_exchange(WarpOp::Any, mask, pred != 0, 0, warpSize);
}
inline int __all_sync(unsigned mask, int pred) {
  using namespace ::loom_emu::detail;
  return (int)warp_exchange(WarpOp::All, mask, pred != 0, 0, warpSize);
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }

template <typename T>
T atomicAdd(T* p, T v) {
  return ::loom_emu::detail::atomic_add(p, v);
}
template <typename T>
T atomicMax(T* p, T v) {
  return ::loom_emu::detail::atomic_max(p, v);
}
template <typename T>
T atomicMin(T* p, T v) {
  return ::loom_emu::detail::atomic_min(p, v);
}
template <typename T>
T atomicExch(T* p, T v) {
  return ::loom_emu::detail::atomic_exch(p, v);
}
template <typename T>
T atomicCAS(T* p, T cmp, T v) {
  return ::loom_emu::detail::atomic_cas(p, cmp, v);
}

// CUDA's integer and floating min/max overloads (device code calls them unqualified).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
