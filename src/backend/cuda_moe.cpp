// The cuda backend's Mixture-of-Experts methods: thin wrappers over kernels/moe.h's cuda twins.
#include "backend/cuda_moe.h"

#include <cuda_runtime_api.h>

#include <type_traits>

#include "kernels/cuda_check.h"
#include "kernels/cuda_device.h"
#include "kernels/moe.h"

namespace loom::cuda_backend {

using cuda::bf16;
using cuda::f16;

namespace {
template <typename T>
T* A(void* p) {
  return static_cast<T*>(p);
}
template <typename T>
const T* A(const void* p) {
  return static_cast<const T*>(p);
}
// The experts' GEMMs run in fp32 only (validate() refuses MoE with bf16/fp16).
[[noreturn]] void fp32_only() {
  cuda::detail::check_failed(__FILE__, __LINE__,
                             "grouped expert GEMMs in bf16/fp16: Mixture of Experts runs in fp32");
}
}  // namespace

template <typename T>
void CudaMoeBackend<T>::Free::operator()(int32_t* p) const {
  cudaFree(p);  // teardown: errors ignored (no throw)
}

template <typename T>
void CudaMoeBackend<T>::moe_router_forward(float* probs, float* lse, int32_t* choice, float* gate,
                                           const float* logits, const cpu::MoeDims& d) {
  cuda::moe_router_forward(probs, lse, choice, gate, logits, d, stream());
}

template <typename T>
int CudaMoeBackend<T>::moe_plan(int32_t* slot, int32_t* offsets, int32_t* rows, int32_t* counts,
                                const int32_t* choice, const cpu::MoeDims& d) {
  const size_t need = cuda::moe_plan_work_ints(d);
  if (need > plan_work_ints_) {  // grows in the first step, then is reused
    LOOM_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream())));
    plan_work_.reset();
    void* p = nullptr;
    LOOM_CUDA_CHECK(cudaMalloc(&p, need * sizeof(int32_t)));
    plan_work_.reset(static_cast<int32_t*>(p));
    plan_work_ints_ = need;
  }
  return cuda::moe_plan(slot, offsets, rows, counts, choice, d, plan_work_.get(), stream());
}

template <typename T>
void CudaMoeBackend<T>::grouped_matmul_forward(void* out, const void* inp, const void* w,
                                               const void* bias,
                                               const std::vector<cpu::GemmSegment>& segs, int IC,
                                               int OC) {
  if constexpr (!std::is_same_v<T, float>) {
    fp32_only();
  } else {
    if (!grouped_) grouped_ = std::make_unique<cuda::GroupedGemm>();
    cuda::grouped_matmul_forward(*grouped_, A<float>(out), A<float>(inp), A<float>(w),
                                 A<float>(bias), segs, IC, OC, stream());
  }
}

template <typename T>
void CudaMoeBackend<T>::grouped_matmul_backward(void* dinp, float* dw, float* dbias,
                                                const void* dout, const void* inp, const void* w,
                                                const std::vector<cpu::GemmSegment>& segs, int IC,
                                                int OC) {
  if constexpr (!std::is_same_v<T, float>) {
    fp32_only();
  } else {
    if (!grouped_) grouped_ = std::make_unique<cuda::GroupedGemm>();
    cuda::grouped_matmul_backward(*grouped_, A<float>(dinp), dw, dbias, A<float>(dout),
                                  A<float>(inp), A<float>(w), segs, IC, OC, stream());
  }
}

template <typename T>
void CudaMoeBackend<T>::moe_gather_rows(void* out, const void* x, const int32_t* rows, int M,
                                        int C) {
  cuda::moe_gather_rows(out, x, rows, M, C, sizeof(T), stream());
}

template <typename T>
void CudaMoeBackend<T>::moe_combine(void* out, const void* y, const void* bias, const int32_t* slot,
                                    const int32_t* choice, const float* gate, const cpu::MoeDims& d,
                                    int C) {
  cuda::moe_combine(A<T>(out), A<T>(y), A<T>(bias), slot, choice, gate, d, C, stream());
}

template <typename T>
void CudaMoeBackend<T>::moe_combine_backward(void* dy, float* dgate, float* dbias, const void* dout,
                                             const void* y, const void* bias, const int32_t* slot,
                                             const int32_t* choice, const float* gate,
                                             const cpu::MoeDims& d, int C) {
  cuda::moe_combine_backward(A<T>(dy), dgate, dbias, A<T>(dout), A<T>(y), A<T>(bias), slot, choice,
                             gate, d, C, stream());
}

template <typename T>
void CudaMoeBackend<T>::moe_scatter_add_rows(void* dx, const void* dxp, const int32_t*,
                                             const int32_t* slot, const cpu::MoeDims& d, int,
                                             int C) {
  cuda::moe_scatter_add_rows(A<T>(dx), A<T>(dxp), slot, d, C, stream());
}

template <typename T>
void CudaMoeBackend<T>::moe_losses(double* acc, const float* probs, const float* lse,
                                   const int32_t* counts, const cpu::MoeDims& d, double aux_coef,
                                   double z_coef, double seq_weight, double tok_weight) {
  cuda::moe_losses(acc, probs, lse, counts, d, aux_coef, z_coef, seq_weight, tok_weight, stream());
}

template <typename T>
void CudaMoeBackend<T>::moe_router_backward(float* dlogits, const float* probs, const float* lse,
                                            const int32_t* choice, const int32_t* slot,
                                            const float* dgate, const int32_t* counts,
                                            const cpu::MoeDims& d, double aux_coef, double z_coef,
                                            double seq_weight, double tok_weight) {
  cuda::moe_router_backward(dlogits, probs, lse, choice, slot, dgate, counts, d, aux_coef, z_coef,
                            seq_weight, tok_weight, stream());
}

template class CudaMoeBackend<float>;
template class CudaMoeBackend<bf16>;
template class CudaMoeBackend<f16>;

}  // namespace loom::cuda_backend
