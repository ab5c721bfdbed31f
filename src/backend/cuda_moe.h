// The cuda backend's Mixture-of-Experts methods (kernels/moe.h's cuda twins), a base class of
// the cuda backend templated on the activation storage type.
#pragma once
#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "kernels/grouped_matmul.h"

namespace loom::cuda_backend {

// The MoE overrides on the backend's stream (Backend::stream()). moe_plan synchronizes: it reads
// the kept rows M back to the host.
template <typename T>
class CudaMoeBackend : public Backend {
 public:
  void moe_router_forward(float* probs, float* lse, int32_t* choice, float* gate,
                          const float* logits, const cpu::MoeDims& d) override;
  int moe_plan(int32_t* slot, int32_t* offsets, int32_t* rows, int32_t* counts,
               const int32_t* choice, const cpu::MoeDims& d) override;
  void moe_gather_rows(void* out, const void* x, const int32_t* rows, int M, int C) override;
  // fp32: cuBLAS grouped GEMMs; bf16/fp16 (MoE is refused there): an error.
  void grouped_matmul_forward(void* out, const void* inp, const void* w, const void* bias,
                              const std::vector<cpu::GemmSegment>& segs, int IC, int OC) override;
  void grouped_matmul_backward(void* dinp, float* dw, float* dbias, const void* dout,
                               const void* inp, const void* w,
                               const std::vector<cpu::GemmSegment>& segs, int IC, int OC) override;
  void moe_combine(void* out, const void* y, const void* bias, const int32_t* slot,
                   const int32_t* choice, const float* gate, const cpu::MoeDims& d, int C) override;
  void moe_combine_backward(void* dy, float* dgate, float* dbias, const void* dout, const void* y,
                            const void* bias, const int32_t* slot, const int32_t* choice,
                            const float* gate, const cpu::MoeDims& d, int C) override;
  void moe_scatter_add_rows(void* dx, const void* dxp, const int32_t* rows, const int32_t* slot,
                            const cpu::MoeDims& d, int M, int C) override;
  void moe_losses(double* acc, const float* probs, const float* lse, const int32_t* counts,
                  const cpu::MoeDims& d, double aux_coef, double z_coef, double seq_weight,
                  double tok_weight) override;
  void moe_router_backward(float* dlogits, const float* probs, const float* lse,
                           const int32_t* choice, const int32_t* slot, const float* dgate,
                           const int32_t* counts, const cpu::MoeDims& d, double aux_coef,
                           double z_coef, double seq_weight, double tok_weight) override;

 private:
  struct Free {
    void operator()(int32_t* p) const;
  };
  std::unique_ptr<int32_t, Free> plan_work_;  // the plan's scratch, grown to the largest dims
  size_t plan_work_ints_ = 0;
  std::unique_ptr<cuda::GroupedGemm> grouped_;  // created by the first grouped GEMM
};

}  // namespace loom::cuda_backend
