// The cuda backend: one GPU, one non-blocking stream, the cuda twins of kernels/ (fp32 or bf16).
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda_act.h"
#include "backend/cuda_moe.h"
#include "backend/cuda_staging.h"
#include "core/check.h"
#include "kernels/adamw.h"
#include "kernels/add_inplace.h"
#include "kernels/attention.h"
#include "kernels/attention_ring.h"
#include "kernels/bias_residual.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda_check.h"
#include "kernels/cuda_device.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/global_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace loom {
namespace {

using cuda::bf16;
using cuda::f16;
using cuda_backend::Act;

struct StreamDeleter {
  void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }  // no throwing in teardown
};
struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
using Stream = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter>;
struct EventDeleter {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
using Event = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter>;
using DeviceDoubles = std::unique_ptr<double, DeviceFree>;
struct GraphDeleter {
  void operator()(cudaGraph_t g) const { cudaGraphDestroy(g); }
};
using Graph = std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, GraphDeleter>;
struct GraphExecDeleter {
  void operator()(cudaGraphExec_t g) const { cudaGraphExecDestroy(g); }
};
using GraphExec = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, GraphExecDeleter>;

DeviceDoubles alloc_doubles(size_t n) {
  void* p = nullptr;
  LOOM_CUDA_CHECK(cudaMalloc(&p, n * sizeof(double)));
  return DeviceDoubles(static_cast<double*>(p));
}

// Sets the current device (before any member that allocates on it is constructed).
int select_device(int gpu) {
  int count = 0;
  LOOM_CUDA_CHECK(cudaGetDeviceCount(&count));
  LOOM_USER_CHECK(gpu >= 0 && gpu < count, "cuda device ", gpu, " does not exist (", count,
                  " visible); check CUDA_VISIBLE_DEVICES and the ranks per node");
  LOOM_CUDA_CHECK(cudaSetDevice(gpu));
  return gpu;
}

Stream make_stream() {
  cudaStream_t s = nullptr;
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

// T: the activation storage type (float, cuda::bf16, cuda::f16). Every call is enqueued on
// stream_ (the MoE methods too: cuda_moe.h).
template <typename T>
class CudaBackendT final : public cuda_backend::CudaMoeBackend<T> {
 public:
  explicit CudaBackendT(int gpu)
      : gpu_(select_device(gpu)),
        stream_(make_stream()),
        gemm_(std::make_unique<cuda::GemmHandle>()),
        partials_(alloc_doubles(cuda::kSumSquaresPartials)) {
    gemm_->allow_tf32 = false;  // fp32 GEMMs match the cpu twin (bf16 GEMMs never use TF32)
    description_ = "cuda " + cuda::device_description(gpu_) + ", " + Act<T>::kCompute;
  }
  ~CudaBackendT() override {
    cudaSetDevice(gpu_);  // teardown on this backend's device; errors ignored (no throw)
    cudaStreamSynchronize(s());
  }

  Device device() const override { return Device::CUDA; }
  DType act_dtype() const override { return Act<T>::kDType; }
  std::string describe() const override { return description_; }
  void* stream() const override { return s(); }
  void memory_info(size_t* free_bytes, size_t* total_bytes) const override {
    LOOM_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
  }
  std::string device_name() const override { return cuda::device_description(gpu_); }

  // ---- memory -----------------------------------------------------------------------------
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s()));
  }
  void to_host(void* host_dst, const void* src, size_t bytes) override {
    if (bytes) LOOM_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s()));
    synchronize();
  }
  // The host buffer may be reused as soon as this returns: from pageable memory the runtime
  // stages the bytes before returning; from pinned memory the copy is asynchronous, so wait.
  void from_host(void* dst, const void* host_src, size_t bytes) override {
    if (!bytes) return;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, s()));
    if (pinned(host_src)) synchronize();
  }
  void zero(void* dst, size_t bytes) override {
    if (bytes) LOOM_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, s()));
  }
  void synchronize() override { LOOM_CUDA_CHECK(cudaStreamSynchronize(s())); }
  std::unique_ptr<HostStaging> make_host_staging(size_t bytes) override {
    return make_pinned_staging(bytes, s());
  }
  bool has_graphs() const override { return true; }
  void capture_begin() override {
    LOOM_CHECK(!capturing_, "a CUDA graph capture is already running");
    graph_.reset();
    LOOM_CUDA_CHECK(cudaStreamBeginCapture(s(), cudaStreamCaptureModeGlobal));
    capturing_ = true;
  }
  void capture_end() override {
    LOOM_CHECK(capturing_, "capture_end without capture_begin");
    capturing_ = false;
    cudaGraph_t g = nullptr;
    LOOM_CUDA_CHECK(cudaStreamEndCapture(s(), &g));
    Graph graph(g);
    cudaGraphExec_t e = nullptr;
    LOOM_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
    graph_.reset(e);
  }
  void replay() override {
    LOOM_CHECK(graph_ != nullptr, "replay() without a captured graph");
    LOOM_CUDA_CHECK(cudaGraphLaunch(graph_.get(), s()));
  }
  int record_mark() override {
    if (marks_used_ == events_.size()) {  // the pool grows in the first steps, then is reused
      cudaEvent_t e = nullptr;
      LOOM_CUDA_CHECK(cudaEventCreate(&e));
      events_.emplace_back(e);
    }
    LOOM_CUDA_CHECK(cudaEventRecord(events_[marks_used_].get(), s()));
    return int(marks_used_++);
  }
  double mark_ms(int a, int b) override {
    LOOM_CHECK(a >= 0 && b >= 0 && size_t(a) < marks_used_ && size_t(b) < marks_used_,
               "timing marks ", a, " and ", b, " of ", marks_used_, " recorded");
    LOOM_CUDA_CHECK(cudaEventSynchronize(events_[size_t(b)].get()));
    float ms = 0;
    LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[size_t(a)].get(), events_[size_t(b)].get()));
    return double(ms);
  }
  void clear_marks() override { marks_used_ = 0; }
  void act_to_host_f32(float* host_dst, const void* act, size_t n) override {
    Act<T>::to_host_f32(host_dst, A(act), n, s());
  }
  void cast_to_act(void* dst, const float* src, size_t n) override {
    Act<T>::from_f32(A(dst), src, n, s());
  }

  // ---- model kernels --------------------------------------------------------------------
  void embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe, int B,
                         int T_, int C, int vstart, int Vl) override {
    cuda::embedding_forward(A(out), tokens, A(wte), A(wpe), B, T_, C, vstart, Vl, s());
  }
  void embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens, int B,
                          int T_, int C, int vstart, int Vl) override {
    cuda::embedding_backward(dwte, dwpe, A(dout), tokens, B, T_, C, vstart, Vl, s(),
                             gemm_->scratch());
  }
  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* w,
                         const void* b, int N, int C) override {
    cuda::layernorm_forward(A(out), mean, rstd, A(inp), A(w), A(b), N, C, s());
  }
  void layernorm_backward(void* dinp, float* dw, float* db, const void* dout, const void* inp,
                          const void* w, const float* mean, const float* rstd, int N,
                          int C) override {
    cuda::layernorm_backward(A(dinp), dw, db, A(dout), A(inp), A(w), mean, rstd, N, C, s(),
                             gemm_->scratch());
  }
  void matmul_forward(void* out, const void* inp, const void* w, const void* bias, int N, int IC,
                      int OC) override {
    cuda::matmul_forward(*gemm_, A(out), A(inp), A(w), A(bias), N, IC, OC, static_cast<T*>(nullptr),
                         s());
  }
  void matmul_backward(void* dinp, float* dw, float* dbias, const void* dout, const void* inp,
                       const void* w, int N, int IC, int OC) override {
    if (N <= 0) return;  // nothing to add (the twin's dw GEMM would have K = 0)
    cuda::matmul_backward(*gemm_, A(dinp), dw, dbias, A(dout), A(inp), A(w), N, IC, OC, s());
  }
  // Flash style: the forward keeps lse (B, NH, T); the backward's scratch is delta (B, NH, T).
  void attention_forward(void* out, float* saved, const void* qkv, int B, int T_, int NH, int NKV,
                         int D) override {
    cuda::attention_forward_gqa(A(out), saved, A(qkv), B, T_, NH, NKV, D, s());
  }
  void attention_backward(void* dqkv, float* scratch, const void* dout, const void* qkv,
                          const void* out, const float* saved, int B, int T_, int NH, int NKV,
                          int D) override {
    cuda::attention_backward_gqa(A(dqkv), scratch, A(dout), A(qkv), A(out), saved, B, T_, NH, NKV,
                                 D, s());
  }
  // Ring attention (context parallelism): the cuda twins need no work area.
  void ring_attention_begin(float* acc, float* m, float* l, const cpu::RingDims& d) override {
    cuda::ring_attention_begin(acc, m, l, d, s());
  }
  void ring_attention_forward_step(float* acc, float* m, float* l, const void* q, const void* k,
                                   const void* v, const int32_t* qpos, const int32_t* kpos,
                                   const cpu::RingDims& d, float*) override {
    cuda::ring_attention_forward_step(acc, m, l, A(q), A(k), A(v), qpos, kpos, d, s());
  }
  void ring_attention_finish(void* out, float* lse, const float* acc, const float* m,
                             const float* l, const cpu::RingDims& d) override {
    cuda::ring_attention_finish(A(out), lse, acc, m, l, d, s());
  }
  void ring_attention_delta(float* delta, const void* dout, const void* out,
                            const cpu::RingDims& d) override {
    cuda::ring_attention_delta(delta, A(dout), A(out), d, s());
  }
  void ring_attention_backward_step(float* dq, float* dk, float* dv, const void* dout,
                                    const void* q, const void* k, const void* v, const float* lse,
                                    const float* delta, const int32_t* qpos, const int32_t* kpos,
                                    const cpu::RingDims& d, float*) override {
    cuda::ring_attention_backward_step(dq, dk, dv, A(dout), A(q), A(k), A(v), lse, delta, qpos,
                                       kpos, d, s());
  }
  void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
               size_t rows) override {
    if (rows == 0 || width == 0) return;
    LOOM_CUDA_CHECK(
        cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice, s()));
  }
  void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* w, int N, int C,
                       float eps) override {
    cuda::rmsnorm_forward(A(out), rstd, A(inp), A(w), N, C, eps, s());
  }
  void rmsnorm_backward(void* dinp, float* dw, const void* dout, const void* inp, const void* w,
                        const float* rstd, int N, int C) override {
    cuda::rmsnorm_backward(A(dinp), dw, A(dout), A(inp), A(w), rstd, N, C, s(), gemm_->scratch());
  }
  void rope_table(float* cos, float* sin, int T_, int D, float theta) override {
    cuda::rope_table(cos, sin, T_, D, theta, s());
  }
  void rope_forward(void* qkv, const float* cos, const float* sin, int B, int T_, int NH, int NKV,
                    int D) override {
    cuda::rope_forward(A(qkv), cos, sin, B, T_, NH, NKV, D, s());
  }
  void rope_backward(void* dqkv, const float* cos, const float* sin, int B, int T_, int NH, int NKV,
                     int D) override {
    cuda::rope_backward(A(dqkv), cos, sin, B, T_, NH, NKV, D, s());
  }
  void swiglu_forward(void* out, const void* gu, int N, int F) override {
    cuda::swiglu_forward(A(out), A(gu), N, F, s());
  }
  void swiglu_backward(void* dgu, const void* dout, const void* gu, int N, int F) override {
    cuda::swiglu_backward(A(dgu), A(dout), A(gu), N, F, s());
  }
  void gelu_forward(void* out, const void* inp, size_t n) override {
    cuda::gelu_forward(A(out), A(inp), n, s());
  }
  void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n) override {
    cuda::gelu_backward(A(dinp), A(inp), A(dout), n, s());
  }
  void bias_residual(void* out, const void* resid, const void* partial, const void* bias, int N,
                     int C) override {
    cuda::bias_residual(A(out), A(resid), A(partial), A(bias), N, C, s());
  }

  // ---- classifier + cross-entropy (unfused: one GEMM, then one pass over the logits) ----------
  void classifier_forward(void* logits, float* maxv, float* sums, float* /*work*/, const void* x,
                          const void* W, const int32_t* targets, int N, int C, int Vl, int vstart,
                          int V) override {
    if (N <= 0 || Vl <= 0) return;
    // logits (N, Vl) = x (N, C) @ W^T, W (Vl, C) row-major
    cuda::gemm(*gemm_, false, true, N, Vl, C, 1.0f, A(x), C, A(W), C, 0.0f, A(logits), Vl, s());
    if (!targets) return;
    LOOM_CHECK(maxv && sums, "classifier_forward: targets given without maxv and sums");
    cuda::ce_row_stats(maxv, sums, A(logits), targets, N, Vl, vstart, V, s());
  }
  void ce_rescale_sums(float* sums, const float* local_max, const float* global_max,
                       int N) override {
    cuda::ce_rescale_sums(sums, local_max, global_max, N, s());
  }
  void ce_loss(float* losses, const float* maxv, const float* sums, int N) override {
    cuda::ce_loss(losses, maxv, sums, N, s());
  }
  void classifier_backward(void* dx, float* dW, void* logits, const float* maxv, const float* sums,
                           const int32_t* targets, float dloss, const void* x, const void* W, int N,
                           int C, int Vl, int vstart, int V) override {
    if (N <= 0 || Vl <= 0) return;
    T* dlogits = A(logits);  // (N, Vl), in place
    cuda::ce_backward_inplace(dlogits, maxv, sums, targets, dloss, N, Vl, vstart, V, s());
    // dW (Vl, C) += dlogits^T (Vl, N) @ x (N, C), fp32 accumulation into the fp32 gradient
    cuda::gemm(*gemm_, true, false, Vl, C, N, 1.0f, dlogits, Vl, A(x), C, 1.0f, dW, C, s());
    // dx (N, C) = dlogits (N, Vl) @ W (Vl, C), overwritten
    cuda::gemm(*gemm_, false, false, N, C, Vl, 1.0f, dlogits, Vl, A(W), C, 0.0f, A(dx), C, s());
  }

  // ---- optimizer ----------------------------------------------------------------------------
  void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                    const cpu::AdamWCoefs* coefs, void* param_act) override {
    if constexpr (std::is_same_v<T, float>) {
      LOOM_CHECK(param_act == nullptr || param_act == param,
                 "fp32 compute: the compute weights are the parameters");
      cuda::adamw_update(param, grad, m, v, n, coefs, nullptr, s());
    } else {
      cuda::adamw_update(param, grad, m, v, n, coefs, A(param_act), s());
    }
  }
  void sum_squares(double* acc, const float* x, size_t n) override {
    cuda::sum_squares(acc, x, n, partials_.get(), s());
  }
  void sum_values(double* acc, const float* x, size_t n) override {
    cuda::sum_values(acc, x, n, partials_.get(), s());
  }
  void decide_step(cpu::StepState* state, const cpu::StepInputs* in,
                   const cpu::StepRule& rule) override {
    cuda::decide_step(state, in, rule, s());
  }
  void add_inplace(float* acc, const float* x, size_t n) override {
    cuda::add_inplace(acc, x, n, s());
  }

 private:
  cudaStream_t s() const { return stream_.get(); }
  static T* A(void* p) { return static_cast<T*>(p); }
  static const T* A(const void* p) { return static_cast<const T*>(p); }

  // True for page-locked (cudaMallocHost / cudaHostRegister) host memory.
  static bool pinned(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();  // plain pageable memory on old runtimes: clear the error
      return false;
    }
    return a.type == cudaMemoryTypeHost;
  }

  int gpu_;
  Stream stream_;
  std::unique_ptr<cuda::GemmHandle> gemm_;  // cuBLASLt, its 32 MiB workspace (and scratch)
  DeviceDoubles partials_;                  // (kSumSquaresPartials) scratch of the sums
  std::vector<Event> events_;               // timing marks: [0, marks_used_) recorded
  size_t marks_used_ = 0;
  GraphExec graph_;  // the captured step (train.cuda_graph)
  bool capturing_ = false;
  std::string description_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(DType act, int gpu) {
  switch (act) {
    case DType::F32:
      return std::make_unique<CudaBackendT<float>>(gpu);
    case DType::BF16:
      return std::make_unique<CudaBackendT<bf16>>(gpu);
    case DType::F16:
      return std::make_unique<CudaBackendT<f16>>(gpu);
    default:
      break;
  }
  throw UserError(
      str("train.dtype: ", dtype_name(act), " is not a compute dtype; use bf16 or fp32"));
}

}  // namespace loom
