// make_backend: the backend a config asks for, or one clear error saying why it cannot be had.
#include "backend/backend.h"

#include "core/check.h"
#include "kernels/cuda_device.h"

namespace loom {

void Backend::capture_begin() {
  throw InternalError(str("CUDA graphs on the ", describe(), " backend"));
}
void Backend::capture_end() { capture_begin(); }
void Backend::replay() { capture_begin(); }

// Mixture-of-Experts routing: the cpu and cuda backends' (validate() refuses MoE elsewhere).
namespace {
[[noreturn]] void no_moe(const Backend& be) {
  throw InternalError(str("Mixture-of-Experts routing on the ", be.describe(), " backend"));
}
}  // namespace
void Backend::moe_router_forward(float*, float*, int32_t*, float*, const float*,
                                 const cpu::MoeDims&) {
  no_moe(*this);
}
int Backend::moe_plan(int32_t*, int32_t*, int32_t*, int32_t*, const int32_t*, const cpu::MoeDims&) {
  no_moe(*this);
}
void Backend::moe_gather_rows(void*, const void*, const int32_t*, int, int) { no_moe(*this); }
void Backend::grouped_matmul_forward(void*, const void*, const void*, const void*,
                                     const std::vector<cpu::GemmSegment>&, int, int) {
  no_moe(*this);
}
void Backend::grouped_matmul_backward(void*, float*, float*, const void*, const void*, const void*,
                                      const std::vector<cpu::GemmSegment>&, int, int) {
  no_moe(*this);
}
void Backend::moe_combine(void*, const void*, const void*, const int32_t*, const int32_t*,
                          const float*, const cpu::MoeDims&, int) {
  no_moe(*this);
}
void Backend::moe_combine_backward(void*, float*, float*, const void*, const void*, const void*,
                                   const int32_t*, const int32_t*, const float*,
                                   const cpu::MoeDims&, int) {
  no_moe(*this);
}
void Backend::moe_scatter_add_rows(void*, const void*, const int32_t*, const int32_t*,
                                   const cpu::MoeDims&, int, int) {
  no_moe(*this);
}
void Backend::moe_losses(double*, const float*, const float*, const int32_t*, const cpu::MoeDims&,
                         double, double, double, double) {
  no_moe(*this);
}
void Backend::moe_router_backward(float*, const float*, const float*, const int32_t*,
                                  const int32_t*, const float*, const int32_t*, const cpu::MoeDims&,
                                  double, double, double, double) {
  no_moe(*this);
}

std::unique_ptr<Backend> make_backend(const std::string& device, const std::string& dtype,
                                      int gpu) {
  const DType act = parse_train_dtype(dtype);
  if (device == "cpu") {
    if (act != DType::F32)
      throw UserError(str("train.dtype: ", dtype,
                          " needs device: cuda; set train.dtype: fp32 or device: cuda"));
    return make_cpu_backend();
  }
  if (device != "cuda") throw UserError(str("device: '", device, "' is not one of cpu, cuda"));
  if (!cuda::cuda_available())
    throw UserError(str("device: cuda, but ", cuda::cuda_unavailable_reason(),
                        "; use device: cpu, or run on a machine with an NVIDIA GPU (sm_80+)"));
#ifdef LOOM_HAVE_CUDA
  return make_cuda_backend(act, gpu);
#else
  (void)gpu;
  return nullptr;  // unreachable: cuda_available() is false without CUDA
#endif
}

}  // namespace loom
