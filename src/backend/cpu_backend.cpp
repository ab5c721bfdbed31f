// The cpu backend: fp32 host memory and the cpu kernels of kernels/ (the numerical reference).
#include <chrono>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "core/check.h"
#include "kernels/add_inplace.h"
#include "kernels/attention.h"
#include "kernels/attention_ring.h"
#include "kernels/bias_residual.h"
#include "kernels/classifier.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/global_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace loom {
namespace {

float* F(void* p) { return static_cast<float*>(p); }
const float* F(const void* p) { return static_cast<const float*>(p); }

// Host memory is backend memory: the upload is a copy.
class HostArea final : public HostStaging {
 public:
  explicit HostArea(size_t bytes) : data_(bytes) {}
  void* data() override { return data_.data(); }
  void wait_writable() override {}
  void upload(void* dst, size_t bytes) override {
    LOOM_CHECK(bytes <= data_.size(), "upload of ", bytes, " bytes from ", data_.size());
    if (bytes) std::memcpy(dst, data_.data(), bytes);
  }

 private:
  std::vector<unsigned char> data_;
};

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::CPU; }
  DType act_dtype() const override { return DType::F32; }
  std::string describe() const override { return "cpu (fp32)"; }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void to_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void from_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void zero(void* dst, size_t bytes) override {
    if (bytes) std::memset(dst, 0, bytes);
  }
  void synchronize() override {}
  std::unique_ptr<HostStaging> make_host_staging(size_t bytes) override {
    return std::make_unique<HostArea>(bytes);
  }
  int record_mark() override {
    marks_.push_back(std::chrono::steady_clock::now());
    return int(marks_.size()) - 1;
  }
  double mark_ms(int a, int b) override {
    return std::chrono::duration<double, std::milli>(marks_.at(size_t(b)) - marks_.at(size_t(a)))
        .count();
  }
  void clear_marks() override { marks_.clear(); }
  void act_to_host_f32(float* dst, const void* act, size_t n) override {
    copy(dst, act, n * sizeof(float));
  }
  void cast_to_act(void* dst, const float* src, size_t n) override {
    if (dst != src) copy(dst, src, n * sizeof(float));
  }

  void embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe, int B,
                         int T, int C, int vstart, int Vl) override {
    cpu::embedding_forward(F(out), tokens, F(wte), F(wpe), B, T, C, vstart, Vl);
  }
  void embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens, int B,
                          int T, int C, int vstart, int Vl) override {
    cpu::embedding_backward(dwte, dwpe, F(dout), tokens, B, T, C, vstart, Vl);
  }
  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* w,
                         const void* b, int N, int C) override {
    cpu::layernorm_forward(F(out), mean, rstd, F(inp), F(w), F(b), N, C);
  }
  void layernorm_backward(void* dinp, float* dw, float* db, const void* dout, const void* inp,
                          const void* w, const float* mean, const float* rstd, int N,
                          int C) override {
    cpu::layernorm_backward(F(dinp), dw, db, F(dout), F(inp), F(w), mean, rstd, N, C);
  }
  void matmul_forward(void* out, const void* inp, const void* w, const void* bias, int N, int IC,
                      int OC) override {
    cpu::matmul_forward(F(out), F(inp), F(w), F(bias), N, IC, OC);
  }
  void matmul_backward(void* dinp, float* dw, float* dbias, const void* dout, const void* inp,
                       const void* w, int N, int IC, int OC) override {
    cpu::matmul_backward(F(dinp), dw, dbias, F(dout), F(inp), F(w), N, IC, OC);
  }
  void attention_forward(void* out, float* saved, const void* qkv, int B, int T, int NH, int NKV,
                         int D) override {
    cpu::attention_forward_gqa(F(out), saved, F(qkv), B, T, NH, NKV, D);
  }
  void attention_backward(void* dqkv, float* scratch, const void* dout, const void* qkv,
                          const void* /*out*/, const float* saved, int B, int T, int NH, int NKV,
                          int D) override {
    cpu::attention_backward_gqa(F(dqkv), scratch, F(dout), F(qkv), saved, B, T, NH, NKV, D);
  }
  void ring_attention_begin(float* acc, float* m, float* l, const cpu::RingDims& d) override {
    cpu::ring_attention_begin(acc, m, l, d);
  }
  void ring_attention_forward_step(float* acc, float* m, float* l, const void* q, const void* k,
                                   const void* v, const int32_t* qpos, const int32_t* kpos,
                                   const cpu::RingDims& d, float* work) override {
    cpu::ring_attention_forward_step(acc, m, l, F(q), F(k), F(v), qpos, kpos, d, work);
  }
  void ring_attention_finish(void* out, float* lse, const float* acc, const float* m,
                             const float* l, const cpu::RingDims& d) override {
    cpu::ring_attention_finish(F(out), lse, acc, m, l, d);
  }
  void ring_attention_delta(float* delta, const void* dout, const void* out,
                            const cpu::RingDims& d) override {
    cpu::ring_attention_delta(delta, F(dout), F(out), d);
  }
  void ring_attention_backward_step(float* dq, float* dk, float* dv, const void* dout,
                                    const void* q, const void* k, const void* v, const float* lse,
                                    const float* delta, const int32_t* qpos, const int32_t* kpos,
                                    const cpu::RingDims& d, float* work) override {
    cpu::ring_attention_backward_step(dq, dk, dv, F(dout), F(q), F(k), F(v), lse, delta, qpos, kpos,
                                      d, work);
  }
  void moe_router_forward(float* probs, float* lse, int32_t* choice, float* gate,
                          const float* logits, const cpu::MoeDims& d) override {
    cpu::moe_router_forward(probs, lse, choice, gate, logits, d);
  }
  int moe_plan(int32_t* slot, int32_t* offsets, int32_t* rows, int32_t* counts,
               const int32_t* choice, const cpu::MoeDims& d) override {
    return cpu::moe_plan(slot, offsets, rows, counts, choice, d);
  }
  void grouped_matmul_forward(void* out, const void* inp, const void* w, const void* bias,
                              const std::vector<cpu::GemmSegment>& segs, int IC, int OC) override {
    cpu::grouped_matmul_forward(F(out), F(inp), F(w), F(bias), segs, IC, OC);
  }
  void grouped_matmul_backward(void* dinp, float* dw, float* dbias, const void* dout,
                               const void* inp, const void* w,
                               const std::vector<cpu::GemmSegment>& segs, int IC, int OC) override {
    cpu::grouped_matmul_backward(F(dinp), dw, dbias, F(dout), F(inp), F(w), segs, IC, OC);
  }
  void moe_gather_rows(void* out, const void* x, const int32_t* rows, int M, int C) override {
    cpu::moe_gather_rows(out, x, rows, M, C, sizeof(float));
  }
  void moe_combine(void* out, const void* y, const void* bias, const int32_t* slot,
                   const int32_t* choice, const float* gate, const cpu::MoeDims& d,
                   int C) override {
    cpu::moe_combine(F(out), F(y), F(bias), slot, choice, gate, d, C);
  }
  void moe_combine_backward(void* dy, float* dgate, float* dbias, const void* dout, const void* y,
                            const void* bias, const int32_t* slot, const int32_t* choice,
                            const float* gate, const cpu::MoeDims& d, int C) override {
    cpu::moe_combine_backward(F(dy), dgate, dbias, F(dout), F(y), F(bias), slot, choice, gate, d,
                              C);
  }
  void moe_scatter_add_rows(void* dx, const void* dxp, const int32_t* rows, const int32_t*,
                            const cpu::MoeDims&, int M, int C) override {
    cpu::moe_scatter_add_rows(F(dx), F(dxp), rows, M, C);
  }
  void moe_losses(double* acc, const float* probs, const float* lse, const int32_t* counts,
                  const cpu::MoeDims& d, double aux_coef, double z_coef, double seq_weight,
                  double tok_weight) override {
    cpu::moe_losses(acc, probs, lse, counts, d, aux_coef, z_coef, seq_weight, tok_weight);
  }
  void moe_router_backward(float* dlogits, const float* probs, const float* lse,
                           const int32_t* choice, const int32_t* slot, const float* dgate,
                           const int32_t* counts, const cpu::MoeDims& d, double aux_coef,
                           double z_coef, double seq_weight, double tok_weight) override {
    cpu::moe_router_backward(dlogits, probs, lse, choice, slot, dgate, counts, d, aux_coef, z_coef,
                             seq_weight, tok_weight);
  }
  void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
               size_t rows) override {
    for (size_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                  width);
  }
  void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* w, int N, int C,
                       float eps) override {
    cpu::rmsnorm_forward(F(out), rstd, F(inp), F(w), N, C, eps);
  }
  void rmsnorm_backward(void* dinp, float* dw, const void* dout, const void* inp, const void* w,
                        const float* rstd, int N, int C) override {
    cpu::rmsnorm_backward(F(dinp), dw, F(dout), F(inp), F(w), rstd, N, C);
  }
  void rope_table(float* cos, float* sin, int T, int D, float theta) override {
    cpu::rope_table(cos, sin, T, D, theta);
  }
  void rope_forward(void* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                    int D) override {
    cpu::rope_forward(F(qkv), cos, sin, B, T, NH, NKV, D);
  }
  void rope_backward(void* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                     int D) override {
    cpu::rope_backward(F(dqkv), cos, sin, B, T, NH, NKV, D);
  }
  void swiglu_forward(void* out, const void* gu, int N, int Fh) override {
    cpu::swiglu_forward(F(out), F(gu), N, Fh);
  }
  void swiglu_backward(void* dgu, const void* dout, const void* gu, int N, int Fh) override {
    cpu::swiglu_backward(F(dgu), F(dout), F(gu), N, Fh);
  }
  void gelu_forward(void* out, const void* inp, size_t n) override {
    cpu::gelu_forward(F(out), F(inp), n);
  }
  void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n) override {
    cpu::gelu_backward(F(dinp), F(inp), F(dout), n);
  }
  void bias_residual(void* out, const void* resid, const void* partial, const void* bias, int N,
                     int C) override {
    cpu::bias_residual(F(out), F(resid), F(partial), F(bias), N, C);
  }

  void classifier_forward(void* logits, float* maxv, float* sums, float* work, const void* x,
                          const void* W, const int32_t* targets, int N, int C, int Vl, int vstart,
                          int V) override {
    cpu::classifier_forward(F(logits), maxv, sums, work, F(x), F(W), targets, N, C, Vl, vstart, V);
  }
  void ce_rescale_sums(float* sums, const float* local_max, const float* global_max,
                       int N) override {
    cpu::ce_rescale_sums(sums, local_max, global_max, N);
  }
  void ce_loss(float* losses, const float* maxv, const float* sums, int N) override {
    cpu::ce_loss(losses, maxv, sums, N);
  }
  void classifier_backward(void* dx, float* dW, void* logits, const float* maxv, const float* sums,
                           const int32_t* targets, float dloss, const void* x, const void* W, int N,
                           int C, int Vl, int vstart, int V) override {
    cpu::classifier_backward(F(dx), dW, F(logits), maxv, sums, targets, dloss, F(x), F(W), N, C, Vl,
                             vstart, V);
  }

  void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                    const cpu::AdamWCoefs* coefs, void* param_act) override {
    LOOM_CHECK(param_act == nullptr || param_act == param, "cpu backend computes in fp32");
    cpu::adamw_update(param, grad, m, v, n, *coefs);
  }
  void sum_squares(double* acc, const float* x, size_t n) override {
    *acc += cpu::sum_squares(x, n);
  }
  void sum_values(double* acc, const float* x, size_t n) override { *acc += cpu::sum_values(x, n); }
  void decide_step(cpu::StepState* state, const cpu::StepInputs* in,
                   const cpu::StepRule& rule) override {
    cpu::decide_step(*state, *in, rule);
  }
  void add_inplace(float* acc, const float* x, size_t n) override { cpu::add_inplace(acc, x, n); }

 private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace loom
