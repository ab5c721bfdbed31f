// Backend: the device a GPTStage and its optimizer run on (cpu or cuda), seen by the model code
// as memory operations and the kernels of one training step. The model code is written once
// over this interface; the cpu backend is the numerical reference.
//
// Pointer conventions of every method:
//   act        activations in the backend's activation dtype (act_dtype(): fp32 on cpu; fp32,
//              bf16 or fp16 on cuda), passed as void*; counts are elements, not bytes.
//   cw         compute weights: the parameters as the kernels read them, in the activation
//              dtype (on cuda with bf16/fp16 a low-precision copy of the fp32 master weights).
//   float*     fp32 buffers: parameter gradients (always fp32, accumulated), master weights,
//              AdamW moments, per-row statistics (layernorm mean/rstd, softmax max/sums).
//   int32_t*   tokens/targets in device memory (copied there with from_host).
// Every pointer is device memory of this backend. Calls are enqueued in order on the backend's
// one compute stream; only host-visible results (to_host) synchronize.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/device_traits.h"
#include "core/dtype.h"
#include "kernels/adamw.h"
#include "kernels/attention_ring.h"
#include "kernels/grouped_matmul.h"
#include "kernels/moe.h"
#include "kernels/step_state.h"

namespace loom {

// A host area the host fills with a step's inputs and copies to backend memory without
// waiting for the device (page-locked on cuda, so the copy is asynchronous). wait_writable()
// waits only until the previous upload's copy has run; upload() enqueues the copy of the first
// `bytes` to dst.
class HostStaging {
 public:
  virtual ~HostStaging() = default;
  virtual void* data() = 0;
  virtual void wait_writable() = 0;
  virtual void upload(void* dst, size_t bytes) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual DType act_dtype() const = 0;
  size_t act_size() const { return dtype_size(act_dtype()); }
  // Element sizes, alignment and kernel work sizes of this device (the memory layout's input).
  DeviceTraits traits() const { return DeviceTraits{device(), act_dtype()}; }
  // "cpu (fp32)", "cuda device 0: NVIDIA H100 ..., bf16 compute"
  virtual std::string describe() const = 0;
  // The compute stream (cudaStream_t) for communication libraries; nullptr on cpu.
  virtual void* stream() const { return nullptr; }
  // Free and total bytes of the device memory (cudaMemGetInfo); 0, 0 on cpu (not checked).
  virtual void memory_info(size_t* free_bytes, size_t* total_bytes) const {
    *free_bytes = *total_bytes = 0;
  }
  // The device's name for messages ("NVIDIA H100 80GB HBM3"); "cpu" on cpu.
  virtual std::string device_name() const { return "cpu"; }

  // ---- memory (bytes) ---------------------------------------------------------------------
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // device to device
  virtual void to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void zero(void* dst, size_t bytes) = 0;
  virtual void synchronize() = 0;

  virtual std::unique_ptr<HostStaging> make_host_staging(size_t bytes) = 0;
  // CUDA graphs: between capture_begin() and capture_end() the stream's work is recorded, not
  // run (a call that would wait for the device or allocate then fails); replay() enqueues the
  // recorded work again. Only backends with graphs (cuda) support them.
  virtual bool has_graphs() const { return false; }
  virtual void capture_begin();
  virtual void capture_end();
  virtual void replay();

  // Timing marks on the compute stream: record_mark() notes where the stream has got to (a
  // CUDA event on cuda, the clock on cpu) and returns its index; mark_ms(a, b) is the time
  // between marks a and b, waiting for b; clear_marks() forgets them (events are reused).
  virtual int record_mark() = 0;
  virtual double mark_ms(int a, int b) = 0;
  virtual void clear_marks() = 0;
  // host (n) fp32 = act (n) converted from the activation dtype (logits for eval/generate).
  virtual void act_to_host_f32(float* host_dst, const void* act, size_t n) = 0;

  // ---- precision ----------------------------------------------------------------------------
  // True when compute weights are a separate low-precision copy of the fp32 parameters.
  bool lowp() const { return act_dtype() != DType::F32; }
  // cw (n) = f32 (n) rounded to the activation dtype (refresh of the compute weights).
  virtual void cast_to_act(void* dst, const float* src, size_t n) = 0;

  // ---- model kernels (contracts of the cpu twins in kernels/) -------------------------------
  // out (B*T, C) = wte rows of the shard's tokens + wpe (nullable) rows of positions.
  virtual void embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe,
                                 int B, int T, int C, int vstart, int Vl) = 0;
  // dwte (Vl, C) += , dwpe (>= T, C) += (nullable).
  virtual void embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                                  int B, int T, int C, int vstart, int Vl) = 0;
  virtual void layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                                 const void* w, const void* b, int N, int C) = 0;
  // dinp, dw, db accumulate.
  virtual void layernorm_backward(void* dinp, float* dw, float* db, const void* dout,
                                  const void* inp, const void* w, const float* mean,
                                  const float* rstd, int N, int C) = 0;
  // out (N, OC) = inp (N, IC) @ w (IC, OC) + bias (OC, nullable).
  virtual void matmul_forward(void* out, const void* inp, const void* w, const void* bias, int N,
                              int IC, int OC) = 0;
  // dinp (N, IC) = dout @ w^T (overwritten, skipped when nullptr); dw += ; dbias += (nullable).
  virtual void matmul_backward(void* dinp, float* dw, float* dbias, const void* dout,
                               const void* inp, const void* w, int N, int IC, int OC) = 0;
  // out (B, T, NH*D) from qkv (B, T, (NH + 2*NKV)*D) = [q | k | v] (NKV dividing NH: grouped
  // query attention; NKV == NH multi-head); fills saved (traits().attention_saved_floats).
  virtual void attention_forward(void* out, float* saved, const void* qkv, int B, int T, int NH,
                                 int NKV, int D) = 0;
  // dqkv (B, T, (NH + 2*NKV)*D) overwritten; out is the forward's output; scratch:
  // traits().attention_scratch_floats.
  virtual void attention_backward(void* dqkv, float* scratch, const void* dout, const void* qkv,
                                  const void* out, const float* saved, int B, int T, int NH,
                                  int NKV, int D) = 0;
  // RMSNorm (kernels/rmsnorm.h): out (N, C), rstd (N); the backward's dinp and dw accumulate.
  virtual void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* w, int N, int C,
                               float eps) = 0;
  virtual void rmsnorm_backward(void* dinp, float* dw, const void* dout, const void* inp,
                                const void* w, const float* rstd, int N, int C) = 0;
  // RoPE (kernels/rope.h): fp32 tables cos, sin (T, D/2) in backend memory; the rotations work in
  // place on the q and k heads of a (B, T, (NH + 2*NKV)*D) qkv or its gradient.
  virtual void rope_table(float* cos, float* sin, int T, int D, float theta) = 0;
  virtual void rope_forward(void* qkv, const float* cos, const float* sin, int B, int T, int NH,
                            int NKV, int D) = 0;
  virtual void rope_backward(void* dqkv, const float* cos, const float* sin, int B, int T, int NH,
                             int NKV, int D) = 0;
  // SwiGLU (kernels/swiglu.h): out (N, F) = silu(gate) * up of gu (N, 2F) = [gate | up];
  // dgu (N, 2F) overwritten.
  virtual void swiglu_forward(void* out, const void* gu, int N, int F) = 0;
  virtual void swiglu_backward(void* dgu, const void* dout, const void* gu, int N, int F) = 0;
  virtual void gelu_forward(void* out, const void* inp, size_t n) = 0;
  // dinp may alias dout.
  virtual void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n) = 0;
  // Context-parallel (ring) attention, one block of keys at a time (kernels/attention_ring.h):
  // q, k, v, out, dout in the act dtype at the row strides of `d`; positions qpos (d.Tq), kpos
  // (d.Tk) int32 in backend memory; acc, m, l, lse, delta, dq, dk, dv fp32; work:
  // traits().ring_attention_work_floats.
  virtual void ring_attention_begin(float* acc, float* m, float* l, const cpu::RingDims& d) = 0;
  virtual void ring_attention_forward_step(float* acc, float* m, float* l, const void* q,
                                           const void* k, const void* v, const int32_t* qpos,
                                           const int32_t* kpos, const cpu::RingDims& d,
                                           float* work) = 0;
  virtual void ring_attention_finish(void* out, float* lse, const float* acc, const float* m,
                                     const float* l, const cpu::RingDims& d) = 0;
  virtual void ring_attention_delta(float* delta, const void* dout, const void* out,
                                    const cpu::RingDims& d) = 0;
  virtual void ring_attention_backward_step(float* dq, float* dk, float* dv, const void* dout,
                                            const void* q, const void* k, const void* v,
                                            const float* lse, const float* delta,
                                            const int32_t* qpos, const int32_t* kpos,
                                            const cpu::RingDims& d, float* work) = 0;
  // rows x width bytes from src (rows `spitch` bytes apart) to dst (`dpitch` apart).
  virtual void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                       size_t rows) = 0;
  // Mixture-of-Experts routing (kernels/moe.h; docs/moe.md): fp32 router state, int32 plans,
  // act-dtype rows. Implemented by the cpu and cuda backends; others throw (validate() refuses
  // MoE there). moe_plan returns the kept rows M (read back to the host, synchronizing: the
  // expert GEMMs need the counts). moe_scatter_add_rows: dx (N, C) += dxp[i] at token rows[i],
  // i < M; slot (N, k) is the same plan seen from the tokens (the cuda twin sums per token).
  virtual void moe_router_forward(float* probs, float* lse, int32_t* choice, float* gate,
                                  const float* logits, const cpu::MoeDims& d);
  virtual int moe_plan(int32_t* slot, int32_t* offsets, int32_t* rows, int32_t* counts,
                       const int32_t* choice, const cpu::MoeDims& d);
  virtual void moe_gather_rows(void* out, const void* x, const int32_t* rows, int M, int C);
  virtual void moe_combine(void* out, const void* y, const void* bias, const int32_t* slot,
                           const int32_t* choice, const float* gate, const cpu::MoeDims& d, int C);
  virtual void moe_combine_backward(void* dy, float* dgate, float* dbias, const void* dout,
                                    const void* y, const void* bias, const int32_t* slot,
                                    const int32_t* choice, const float* gate, const cpu::MoeDims& d,
                                    int C);
  virtual void moe_scatter_add_rows(void* dx, const void* dxp, const int32_t* rows,
                                    const int32_t* slot, const cpu::MoeDims& d, int M, int C);
  virtual void moe_losses(double* acc, const float* probs, const float* lse, const int32_t* counts,
                          const cpu::MoeDims& d, double aux_coef, double z_coef, double seq_weight,
                          double tok_weight);
  virtual void moe_router_backward(float* dlogits, const float* probs, const float* lse,
                                   const int32_t* choice, const int32_t* slot, const float* dgate,
                                   const int32_t* counts, const cpu::MoeDims& d, double aux_coef,
                                   double z_coef, double seq_weight, double tok_weight);
  // The experts' linear layers as grouped GEMMs (kernels/grouped_matmul.h): per segment of
  // stacked rows, matmul_forward / matmul_backward with its expert's weight and bias (w holds
  // the experts' (IC, OC) matrices one after the other, bias their (OC) rows).
  virtual void grouped_matmul_forward(void* out, const void* inp, const void* w, const void* bias,
                                      const std::vector<cpu::GemmSegment>& segs, int IC, int OC);
  virtual void grouped_matmul_backward(void* dinp, float* dw, float* dbias, const void* dout,
                                       const void* inp, const void* w,
                                       const std::vector<cpu::GemmSegment>& segs, int IC, int OC);
  // out (N, C) = resid + (partial + bias (C)): the row-parallel projection's epilogue.
  virtual void bias_residual(void* out, const void* resid, const void* partial, const void* bias,
                             int N, int C) = 0;

  // Classifier + softmax cross-entropy over this rank's vocab shard [vstart, vstart + Vl)
  // (ids >= V are padding), as kernels/classifier.h: logits (N, Vl) = x (N, C) @ W (Vl, C)^T;
  // with targets (nullable) also maxv (N) and sums (N, 2) relative to the shard's max.
  // work: traits().classifier_work_floats(N, Vl) floats.
  virtual void classifier_forward(void* logits, float* maxv, float* sums, float* work,
                                  const void* x, const void* W, const int32_t* targets, int N,
                                  int C, int Vl, int vstart, int V) = 0;
  virtual void ce_rescale_sums(float* sums, const float* local_max, const float* global_max,
                               int N) = 0;
  virtual void ce_loss(float* losses, const float* maxv, const float* sums, int N) = 0;
  // logits become dlogits in place; dW (Vl, C) += dlogits^T x; dx (N, C) = dlogits W.
  virtual void classifier_backward(void* dx, float* dW, void* logits, const float* maxv,
                                   const float* sums, const int32_t* targets, float dloss,
                                   const void* x, const void* W, int N, int C, int Vl, int vstart,
                                   int V) = 0;

  // ---- optimizer (fp32 flat buffers) -----------------------------------------------------
  // AdamW on n elements with the factors at `coefs` (backend memory: the kernel reads them when
  // it runs, so the host need not know them); param_act (nullable) receives the updated
  // weights in the act dtype.
  virtual void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                            const cpu::AdamWCoefs* coefs, void* param_act) = 0;
  // *acc (one double of backend memory) += sum(x^2) or sum(x), accumulated in double.
  virtual void sum_squares(double* acc, const float* x, size_t n) = 0;
  virtual void sum_values(double* acc, const float* x, size_t n) = 0;
  // cpu::decide_step on the state in backend memory (after its norm_sq is the world's), with
  // the step's inputs read from backend memory.
  virtual void decide_step(cpu::StepState* state, const cpu::StepInputs* in,
                           const cpu::StepRule& rule) = 0;
  virtual void add_inplace(float* acc, const float* x, size_t n) = 0;  // acc += x
};

// A cpu backend (fp32); its owner passes it to whatever runs on it.
std::unique_ptr<Backend> make_cpu_backend();
#ifdef LOOM_HAVE_CUDA
// src/backend/cuda_backend.cpp: compute in `act` (F32, BF16 or F16) on GPU `gpu`.
std::unique_ptr<Backend> make_cuda_backend(DType act, int gpu);
#endif

// The backend for `device` ("cpu" | "cuda") and compute dtype ("fp32" | "bf16" | "fp16"),
// on GPU `gpu` (cuda). Throws UserError when cuda is unavailable (naming why) or the dtype is
// not supported by the device.
std::unique_ptr<Backend> make_backend(const std::string& device, const std::string& dtype,
                                      int gpu = 0);

}  // namespace loom
