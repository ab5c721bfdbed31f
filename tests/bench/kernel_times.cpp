// kernel_times: loom's own cuda kernels at the shapes of one GPT-2 micro-batch in bf16, each
// timed with CUDA events (median of repeated launches after a warm-up) and set against its
// roofline: max(FLOPs / tensor peak, bytes / bandwidth). The per-kernel view of a training step
// without a profiler. Benchmark program, not a test: scripts/gpu_lease.sh runs it on a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/bias_residual.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda_device.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"

using loom::cuda::bf16;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "kernel_times: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// A device array filled from the host with values in [lo, hi) (a fixed pseudo-random sequence:
// never zeros, which can run faster than real data).
template <typename T>
T* device_array(size_t n, float lo, float hi, unsigned seed) {
  std::vector<T> h(n);
  unsigned x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    const float u = lo + (hi - lo) * float(x >> 8) / float(1u << 24);
    if constexpr (std::is_same_v<T, bf16>)
      h[i] = loom::cuda::bf16_from_float(u);
    else
      h[i] = T(u);
  }
  T* d = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(T)), "cudaMalloc");
  check(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}

int32_t* device_tokens(size_t n, int vocab) {
  std::vector<int32_t> h(n);
  unsigned x = 12345;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    h[i] = int32_t((x >> 8) % unsigned(vocab));
  }
  int32_t* d = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(int32_t)), "cudaMalloc");
  check(cudaMemcpy(d, h.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}

struct Timer {
  cudaStream_t stream;
  int reps;
  // Median milliseconds of one launch of f (each launch between its own pair of events).
  float median_ms(const std::function<void()>& f) const {
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    for (int i = 0; i < 2; ++i) f();  // warm-up
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
      check(cudaEventRecord(a, stream), "cudaEventRecord");
      f();
      check(cudaEventRecord(b, stream), "cudaEventRecord");
      check(cudaEventSynchronize(b), "cudaEventSynchronize");
      float t = 0;
      check(cudaEventElapsedTime(&t, a, b), "cudaEventElapsedTime");
      ms.push_back(t);
    }
    check(cudaGetLastError(), "a kernel launch");
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }
};

}  // namespace

int main(int argc, char** argv) {
  // usage: kernel_times [B T C NH V REPS TENSOR_FLOPS BYTES_PER_S]
  const int B = argc > 1 ? std::atoi(argv[1]) : 16, T = argc > 2 ? std::atoi(argv[2]) : 1024;
  const int C = argc > 3 ? std::atoi(argv[3]) : 768, NH = argc > 4 ? std::atoi(argv[4]) : 12;
  const int V = argc > 5 ? std::atoi(argv[5]) : 50304, reps = argc > 6 ? std::atoi(argv[6]) : 20;
  const double peak = argc > 7 ? std::atof(argv[7]) : 989e12;  // H100 SXM dense bf16
  const double bw = argc > 8 ? std::atof(argv[8]) : 3.35e12;   // H100 SXM HBM3
  if (B < 1 || T < 1 || C < 1 || NH < 1 || C % NH != 0 || V < 1 || reps < 1) {
    std::fprintf(stderr, "usage: kernel_times [B T C NH V REPS TENSOR_FLOPS BYTES_PER_S]\n");
    return 2;
  }
  if (!loom::cuda::cuda_available()) {
    std::fprintf(stderr, "kernel_times: no GPU: %s\n",
                 loom::cuda::cuda_unavailable_reason().c_str());
    return 1;
  }
  const size_t N = size_t(B) * T, H = 4 * size_t(C);
  // Parameters of a 12-layer GPT-2 of this width (124M at C 768, V 50304): AdamW's buffer.
  const size_t P = size_t(V) * C + size_t(T) * C + 12 * (12 * size_t(C) * C + 13 * size_t(C));
  const int hd = C / NH;
  cudaStream_t st;
  check(cudaStreamCreate(&st), "cudaStreamCreate");
  void* s = st;
  Timer timer{st, reps};

  // Activations (bf16) of one micro-batch; statistics and gradients of weights in fp32.
  bf16 *x = device_array<bf16>(N * C, -1, 1, 1), *y = device_array<bf16>(N * C, -1, 1, 2);
  bf16* dy = device_array<bf16>(N * C, -1e-2f, 1e-2f, 3);
  bf16 *qkv = device_array<bf16>(N * 3 * C, -1, 1, 4),
       *dqkv = device_array<bf16>(N * 3 * C, 0, 1, 5);
  bf16 *hid = device_array<bf16>(N * H, -2, 2, 6), *hid2 = device_array<bf16>(N * H, -2, 2, 7);
  bf16* dhid = device_array<bf16>(N * H, -1e-2f, 1e-2f, 8);
  bf16 *w = device_array<bf16>(C, 0.5f, 1.5f, 9), *bias = device_array<bf16>(C, -0.1f, 0.1f, 10);
  bf16* wte = device_array<bf16>(size_t(V) * C, -0.1f, 0.1f, 11);
  bf16* wpe = device_array<bf16>(size_t(T) * C, -0.1f, 0.1f, 12);
  bf16* logits = device_array<bf16>(N * V, -4, 4, 13);
  float *mean = device_array<float>(N, -0.1f, 0.1f, 14),
        *rstd = device_array<float>(N, 0.5f, 2, 15);
  float *lse = device_array<float>(N * NH, 0, 1, 16),
        *delta = device_array<float>(N * NH, 0, 1, 17);
  float *dw = device_array<float>(C, 0, 1, 18), *db = device_array<float>(C, 0, 1, 19);
  float *maxv = device_array<float>(N, 0, 1, 20), *sums = device_array<float>(2 * N, 1, 2, 21);
  float* dwte = device_array<float>(size_t(V) * C, 0, 1, 22);
  float* dwpe = device_array<float>(size_t(T) * C, 0, 1, 23);
  int32_t* tokens = device_tokens(N, V);
  const size_t scratch_bytes = size_t(32) << 20;
  void* scratch = nullptr;
  check(cudaMalloc(&scratch, scratch_bytes), "cudaMalloc");
  const loom::cuda::Workspace ws{scratch, scratch_bytes};

  struct Row {
    std::string name;
    double flops, bytes;
    std::function<void()> run;
  };
  const double nc2 = 2.0 * double(N) * C, nh2 = 2.0 * double(N) * H, nv2 = 2.0 * double(N) * V;
  const double attn_mm = 2.0 * B * NH * double(T) * T * hd / 2;  // one causal T x T x hd product
  std::vector<Row> rows = {
      {"embedding fwd", 0, nc2 * 2 + 2.0 * T * C + 4.0 * N,
       [&] { loom::cuda::embedding_forward(y, tokens, wte, wpe, B, T, C, 0, V, s); }},
      {"layernorm fwd", 8.0 * N * C, nc2 * 2 + 8.0 * N,
       [&] { loom::cuda::layernorm_forward(y, mean, rstd, x, w, bias, int(N), C, s); }},
      {"attention fwd (2 products)", 2 * attn_mm, 2.0 * N * 3 * C + nc2 + 4.0 * N * NH,
       [&] { loom::cuda::attention_forward(y, lse, qkv, B, T, C, NH, s); }},
      {"bias + residual", double(N) * C * 2, 3 * nc2,
       [&] { loom::cuda::bias_residual(y, x, dy, bias, int(N), C, s); }},
      {"gelu fwd", 10.0 * N * H, 2 * nh2, [&] { loom::cuda::gelu_forward(hid2, hid, N * H, s); }},
      {"cross-entropy row stats", 4.0 * N * V, nv2 + 8.0 * N,
       [&] { loom::cuda::ce_row_stats(maxv, sums, logits, tokens, int(N), V, 0, V, s); }},
      {"cross-entropy bwd (in place)", 4.0 * N * V, 2 * nv2,
       [&] {
         loom::cuda::ce_backward_inplace(logits, maxv, sums, tokens, 1.0f / N, int(N), V, 0, V, s);
       }},
      {"gelu bwd", 12.0 * N * H, 3 * nh2,
       [&] { loom::cuda::gelu_backward(dhid, hid, hid2, N * H, s); }},
      {"layernorm bwd", 12.0 * N * C, nc2 * 4 + 8.0 * N,
       [&] { loom::cuda::layernorm_backward(x, dw, db, dy, y, w, mean, rstd, int(N), C, s, ws); }},
      // The 5 products a flash backward needs (S, dV, dP, dQ, dK); loom's kernels recompute more.
      {"attention bwd (5 products)", 5 * attn_mm, 2.0 * N * 3 * C * 2 + 2 * nc2 + 8.0 * N * NH,
       [&] { loom::cuda::attention_backward(dqkv, delta, dy, qkv, y, lse, B, T, C, NH, s); }},
      {"embedding bwd", 0, nc2 + 4.0 * N * C + 4.0 * T * C * 2,
       [&] { loom::cuda::embedding_backward(dwte, dwpe, dy, tokens, B, T, C, 0, V, s, ws); }},
  };

  // AdamW over the model's flat buffer: reads master, gradient, m, v, writes master, m, v
  // and the bf16 compute copy.
  float *pm = device_array<float>(P, -0.1f, 0.1f, 30),
        *pg = device_array<float>(P, -1e-3f, 1e-3f, 31);
  float *m1 = device_array<float>(P, -1e-3f, 1e-3f, 32), *m2 = device_array<float>(P, 0, 1e-6f, 33);
  bf16* pc = device_array<bf16>(P, 0, 1, 34);
  const loom::cpu::AdamWParams ap{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 10, 1.0f};
  rows.push_back({"adamw (" + std::to_string(P / 1000000) + "M parameters)", 12.0 * P, 30.0 * P,
                  [&] { loom::cuda::adamw_update(pm, pg, m1, m2, P, ap, pc, s); }});

  std::printf(
      "| kernel (B %d, T %d, C %d, heads %d, V %d, bf16) | ms | GB/s | TFLOP/s | floor ms | "
      "bound | ms / floor |\n|---|--:|--:|--:|--:|---|--:|\n",
      B, T, C, NH, V);
  double sum = 0, sum_floor = 0;
  for (const Row& r : rows) {
    const float ms = timer.median_ms(r.run);
    const double t_flop = r.flops / peak * 1e3, t_mem = r.bytes / bw * 1e3;
    const double floor_ms = std::max(t_flop, t_mem);
    sum += ms;
    sum_floor += floor_ms;
    std::printf("| %s | %.4f | %.0f | %.1f | %.4f | %s | %.2f |\n", r.name.c_str(), ms,
                r.bytes / (ms * 1e-3) / 1e9, r.flops / (ms * 1e-3) / 1e12, floor_ms,
                t_flop > t_mem ? "flops" : "memory", ms / floor_ms);
    std::fflush(stdout);
  }
  std::printf("\nall rows: %.3f ms, floor %.3f ms (peak %.0f TFLOP/s, %.2f TB/s)\n", sum, sum_floor,
              peak / 1e12, bw / 1e12);
  return 0;
}
