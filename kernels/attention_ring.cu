// Ring attention cuda twin: a warp per query row (forward, dq) or key row (dk, dv), lanes over
// the head dimension, one key (or query) at a time with an fp32 online softmax.
#include "kernels/attention_ring.h"
#include "kernels/cuda_common.cuh"

namespace loom::cuda {
namespace {

constexpr int kWarps = 4;            // warps per block
constexpr int kMaxPerLane = 4;       // D <= 128
constexpr float kExpFloor = -80.0f;  // exp of scores clamped as the cpu twin's exp_clamped

__device__ __forceinline__ float exp_clamped(float x) { return expf(fmaxf(x, kExpFloor)); }

// x (D) of one row into the lane's registers: element e of lane `lane` is column lane + 32 e.
template <typename T>
__device__ __forceinline__ void load_row(const T* p, int D, int lane, float (&x)[kMaxPerLane]) {
#pragma unroll
  for (int e = 0; e < kMaxPerLane; e++) {
    const int c = lane + 32 * e;
    x[e] = c < D ? to_f32(p[c]) : 0.0f;
  }
}

__device__ __forceinline__ float row_dot(const float (&a)[kMaxPerLane],
                                         const float (&b)[kMaxPerLane]) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; e++) s += a[e] * b[e];
  return warp_sum(s);
}

__global__ void begin_kernel(float* acc, float* m, float* l, size_t nacc, size_t rows) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nacc; i += stride) {
    acc[i] = 0.0f;
    if (i < rows) m[i] = -INFINITY, l[i] = 0.0f;
  }
}

// One warp per (b, h, t) query row.
template <typename T>
__global__ void forward_kernel(float* acc, float* m, float* l, const T* q, const T* k, const T* v,
                               const int* qpos, const int* kpos, RingDims d, float scale) {
  const int lane = threadIdx.x & 31;
  const long long row = (long long)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (row >= (long long)d.B * d.NH * d.Tq) return;
  const int t = (int)(row % d.Tq), bh = (int)(row / d.Tq), b = bh / d.NH, h = bh % d.NH;
  const int kvh = h / (d.NH / d.NKV), C = d.NH * d.D;
  float qr[kMaxPerLane], a[kMaxPerLane], kr[kMaxPerLane], vr[kMaxPerLane];
  load_row(q + ((size_t)b * d.Tq + t) * d.ldq + (size_t)h * d.D, d.D, lane, qr);
  float* arow = acc + ((size_t)b * d.Tq + t) * C + (size_t)h * d.D;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; e++) a[e] = lane + 32 * e < d.D ? arow[lane + 32 * e] : 0.0f;
  // Lane 0 alone reads and writes the row's state; the others get it by shuffle.
  float mx = lane == 0 ? m[row] : 0.0f, sum = lane == 0 ? l[row] : 0.0f;
  mx = __shfl_sync(kFullMask, mx, 0);
  sum = __shfl_sync(kFullMask, sum, 0);
  const int qp = qpos[t];
  for (int j = 0; j < d.Tk; j++) {
    if (kpos[j] > qp) continue;  // uniform over the warp
    const size_t kb = ((size_t)b * d.Tk + j) * d.ldkv + (size_t)kvh * d.D;
    load_row(k + kb, d.D, lane, kr);
    const float s = row_dot(qr, kr) * scale;
    const float mnew = fmaxf(mx, s);
    const float keep = exp_clamped(mx - mnew), p = exp_clamped(s - mnew);
    load_row(v + kb, d.D, lane, vr);
#pragma unroll
    for (int e = 0; e < kMaxPerLane; e++) a[e] = a[e] * keep + p * vr[e];
    sum = sum * keep + p;
    mx = mnew;
  }
#pragma unroll
  for (int e = 0; e < kMaxPerLane; e++)
    if (lane + 32 * e < d.D) arow[lane + 32 * e] = a[e];
  if (lane == 0) m[row] = mx, l[row] = sum;
}

template <typename T>
__global__ void finish_kernel(T* out, float* lse, const float* acc, const float* m, const float* l,
                              RingDims d) {
  const size_t n = (size_t)d.B * d.Tq * d.NH * d.D, stride = (size_t)gridDim.x * blockDim.x;
  const int C = d.NH * d.D;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const size_t bt = i / C;
    const int h = (int)(i % C) / d.D, b = (int)(bt / d.Tq), t = (int)(bt % d.Tq);
    const size_t r = ((size_t)b * d.NH + h) * d.Tq + t;
    out[i] = from_f32<T>(acc[i] / l[r]);
    if ((int)(i % C) % d.D == 0) lse[r] = m[r] + logf(l[r]);
  }
}

template <typename T>
__global__ void delta_kernel(float* delta, const T* dout, const T* out, RingDims d) {
  const int lane = threadIdx.x & 31;
  const long long row = (long long)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (row >= (long long)d.B * d.NH * d.Tq) return;
  const int t = (int)(row % d.Tq), bh = (int)(row / d.Tq), b = bh / d.NH, h = bh % d.NH;
  const size_t o = ((size_t)b * d.Tq + t) * (d.NH * d.D) + (size_t)h * d.D;
  float g[kMaxPerLane], y[kMaxPerLane];
  load_row(dout + o, d.D, lane, g);
  load_row(out + o, d.D, lane, y);
  const float s = row_dot(g, y);
  if (lane == 0) delta[row] = s;
}

// dq of one (b, h, t) query row: a warp over the keys.
template <typename T>
__global__ void dq_kernel(float* dq, const T* dout, const T* q, const T* k, const T* v,
                          const float* lse, const float* delta, const int* qpos, const int* kpos,
                          RingDims d, float scale) {
  const int lane = threadIdx.x & 31;
  const long long row = (long long)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (row >= (long long)d.B * d.NH * d.Tq) return;
  const int t = (int)(row % d.Tq), bh = (int)(row / d.Tq), b = bh / d.NH, h = bh % d.NH;
  const int kvh = h / (d.NH / d.NKV);
  float qr[kMaxPerLane], g[kMaxPerLane], kr[kMaxPerLane], vr[kMaxPerLane], acc[kMaxPerLane] = {};
  load_row(q + ((size_t)b * d.Tq + t) * d.ldq + (size_t)h * d.D, d.D, lane, qr);
  load_row(dout + ((size_t)b * d.Tq + t) * (d.NH * d.D) + (size_t)h * d.D, d.D, lane, g);
  const float ls = lse[row], dl = delta[row];
  for (int j = 0; j < d.Tk; j++) {
    if (kpos[j] > qpos[t]) continue;
    const size_t kb = ((size_t)b * d.Tk + j) * d.ldkv + (size_t)kvh * d.D;
    load_row(k + kb, d.D, lane, kr);
    load_row(v + kb, d.D, lane, vr);
    const float p = exp_clamped(row_dot(qr, kr) * scale - ls);
    const float ds = p * (row_dot(g, vr) - dl);
#pragma unroll
    for (int e = 0; e < kMaxPerLane; e++) acc[e] += ds * kr[e];
  }
  float* out = dq + ((size_t)b * d.Tq + t) * d.ldq + (size_t)h * d.D;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; e++)
    if (lane + 32 * e < d.D) out[lane + 32 * e] += scale * acc[e];
}

// dk and dv of one (b, kv head, j) key row: a warp over the group's query heads, then rows.
template <typename T>
__global__ void dkv_kernel(float* dk, float* dv, const T* dout, const T* q, const T* k, const T* v,
                           const float* lse, const float* delta, const int* qpos, const int* kpos,
                           RingDims d, float scale) {
  const int lane = threadIdx.x & 31;
  const long long row = (long long)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (row >= (long long)d.B * d.NKV * d.Tk) return;
  const int j = (int)(row % d.Tk), bk = (int)(row / d.Tk), b = bk / d.NKV, kvh = bk % d.NKV;
  const int group = d.NH / d.NKV;
  const size_t kb = ((size_t)b * d.Tk + j) * d.ldkv + (size_t)kvh * d.D;
  float kr[kMaxPerLane], vr[kMaxPerLane], qr[kMaxPerLane], g[kMaxPerLane];
  float ak[kMaxPerLane] = {}, av[kMaxPerLane] = {};
  load_row(k + kb, d.D, lane, kr);
  load_row(v + kb, d.D, lane, vr);
  for (int h = kvh * group; h < (kvh + 1) * group; h++) {
    const size_t r0 = ((size_t)b * d.NH + h) * d.Tq;
    for (int t = 0; t < d.Tq; t++) {
      if (kpos[j] > qpos[t]) continue;
      load_row(q + ((size_t)b * d.Tq + t) * d.ldq + (size_t)h * d.D, d.D, lane, qr);
      load_row(dout + ((size_t)b * d.Tq + t) * (d.NH * d.D) + (size_t)h * d.D, d.D, lane, g);
      const float p = exp_clamped(row_dot(qr, kr) * scale - lse[r0 + t]);
      const float ds = p * (row_dot(g, vr) - delta[r0 + t]);
#pragma unroll
      for (int e = 0; e < kMaxPerLane; e++) ak[e] += ds * qr[e], av[e] += p * g[e];
    }
  }
#pragma unroll
  for (int e = 0; e < kMaxPerLane; e++)
    if (lane + 32 * e < d.D) {
      dk[kb + lane + 32 * e] += scale * ak[e];
      dv[kb + lane + 32 * e] += av[e];
    }
}

unsigned warp_blocks(long long rows) { return (unsigned)((rows + kWarps - 1) / kWarps); }

void check_dims(const RingDims& d) {
  LOOM_CUDA_REQUIRE(d.D >= 1 && d.D <= 32 * kMaxPerLane,
                    "ring attention: head size must be 1..128");
  LOOM_CUDA_REQUIRE(d.NKV >= 1 && d.NH % d.NKV == 0,
                    "ring attention: kv heads must divide the query heads");
}

}  // namespace

void ring_attention_begin(float* acc, float* m, float* l, const RingDims& d, void* stream) {
  const size_t rows = (size_t)d.B * d.NH * d.Tq, nacc = rows * d.D;
  if (nacc == 0) return;
  LOOM_LAUNCH(begin_kernel, grid_for(nacc, 256), 256, 0, as_stream(stream))(acc, m, l, nacc, rows);
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void ring_attention_forward_step(float* acc, float* m, float* l, const T* q, const T* k,
                                 const T* v, const int* qpos, const int* kpos, const RingDims& d,
                                 void* stream) {
  check_dims(d);
  const long long rows = (long long)d.B * d.NH * d.Tq;
  if (rows == 0 || d.Tk == 0) return;
  LOOM_LAUNCH(forward_kernel<dev_t<T>>, warp_blocks(rows), 32 * kWarps, 0, as_stream(stream))
  (acc, m, l, dev_ptr(q), dev_ptr(k), dev_ptr(v), qpos, kpos, d, 1.0f / sqrtf((float)d.D));
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void ring_attention_finish(T* out, float* lse, const float* acc, const float* m, const float* l,
                           const RingDims& d, void* stream) {
  const size_t n = (size_t)d.B * d.Tq * d.NH * d.D;
  if (n == 0) return;
  LOOM_LAUNCH(finish_kernel<dev_t<T>>, grid_for(n, 256), 256, 0, as_stream(stream))
  (dev_ptr(out), lse, acc, m, l, d);
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void ring_attention_delta(float* delta, const T* dout, const T* out, const RingDims& d,
                          void* stream) {
  check_dims(d);
  const long long rows = (long long)d.B * d.NH * d.Tq;
  if (rows == 0) return;
  LOOM_LAUNCH(delta_kernel<dev_t<T>>, warp_blocks(rows), 32 * kWarps, 0, as_stream(stream))
  (delta, dev_ptr(dout), dev_ptr(out), d);
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void ring_attention_backward_step(float* dq, float* dk, float* dv, const T* dout, const T* q,
                                  const T* k, const T* v, const float* lse, const float* delta,
                                  const int* qpos, const int* kpos, const RingDims& d,
                                  void* stream) {
  check_dims(d);
  const float scale = 1.0f / sqrtf((float)d.D);
  const long long qrows = (long long)d.B * d.NH * d.Tq, krows = (long long)d.B * d.NKV * d.Tk;
  if (qrows == 0 || krows == 0) return;
  cudaStream_t s = as_stream(stream);
  LOOM_LAUNCH(dq_kernel<dev_t<T>>, warp_blocks(qrows), 32 * kWarps, 0, s)
  (dq, dev_ptr(dout), dev_ptr(q), dev_ptr(k), dev_ptr(v), lse, delta, qpos, kpos, d, scale);
  LOOM_CUDA_CHECK_LAUNCH();
  LOOM_LAUNCH(dkv_kernel<dev_t<T>>, warp_blocks(krows), 32 * kWarps, 0, s)
  (dk, dv, dev_ptr(dout), dev_ptr(q), dev_ptr(k), dev_ptr(v), lse, delta, qpos, kpos, d, scale);
  LOOM_CUDA_CHECK_LAUNCH();
}

#define LOOM_RING_INSTANTIATE(T)                                                                 \
  template void ring_attention_forward_step<T>(float*, float*, float*, const T*, const T*,       \
                                               const T*, const int*, const int*, const RingDims&, \
                                               void*);                                           \
  template void ring_attention_finish<T>(T*, float*, const float*, const float*, const float*,   \
                                         const RingDims&, void*);                                \
  template void ring_attention_delta<T>(float*, const T*, const T*, const RingDims&, void*);     \
  template void ring_attention_backward_step<T>(float*, float*, float*, const T*, const T*,      \
                                                const T*, const T*, const float*, const float*,  \
                                                const int*, const int*, const RingDims&, void*);
LOOM_RING_INSTANTIATE(float)
LOOM_RING_INSTANTIATE(bf16)
LOOM_RING_INSTANTIATE(f16)
#undef LOOM_RING_INSTANTIATE

}  // namespace loom::cuda
