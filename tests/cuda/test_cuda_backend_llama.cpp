// The cuda Backend's Llama kernels (RMSNorm, RoPE, SwiGLU, the bias-free residual epilogue)
// against the cpu backend, on the same inputs; tolerances as in cuda_backend_test.h.
#include "tests/cuda/cuda_backend_test.h"

namespace loom::cudatest {
namespace {

TEST_P(CudaBackendTest, RmsNorm) {
  const int N = 37, C = 72;  // C not a multiple of a warp: the tails
  const float eps = 1e-5f;
  const auto x = act_vals(randu(size_t(N) * C, 41, -3.0f, 3.0f));
  const auto w = act_vals(randu(size_t(C), 42, 0.5f, 1.5f));
  std::vector<float> out(x.size()), rstd(N);
  ref().rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  Buffer dx = act(x), dw = act(w), dout = act_nan(out.size()), drstd = f32_nan(N);
  be().rmsnorm_forward(dout.data(), F(drstd), dx.data(), dw.data(), N, C, eps);
  EXPECT_REL_LE(get_act(dout, out.size()), out, tol(kTolF32), "rmsnorm_forward out");
  EXPECT_REL_LE(get_f32(drstd, N), rstd, tol(kTolF32), "rmsnorm_forward rstd");

  // Both gradients accumulate: start them from the same non-zero values.
  const auto g = act_vals(randu(x.size(), 43));
  auto gin = act_vals(randu(x.size(), 44)), gw = randu(size_t(C), 45);
  Buffer dg = act(g), dgin = act(gin), dgw = dev(gw);
  ref().rmsnorm_backward(gin.data(), gw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C);
  be().rmsnorm_backward(dgin.data(), F(dgw), dg.data(), dx.data(), dw.data(), F(drstd), N, C);
  EXPECT_REL_LE(get_act(dgin, gin.size()), gin, tol(kTolF32), "rmsnorm_backward dinp");
  EXPECT_REL_LE(get_f32(dgw, size_t(C)), gw, tol(kTolF32), "rmsnorm_backward dw");
}

TEST_P(CudaBackendTest, RopeOnGroupedQkv) {
  const int B = 2, T = 19, NH = 4, NKV = 2, D = 16, W = (NH + 2 * NKV) * D;
  const float theta = 500.0f;  // a small base: angles far from 0 within T positions
  const size_t half = size_t(T) * size_t(D / 2);
  std::vector<float> cs(half), sn(half);
  ref().rope_table(cs.data(), sn.data(), T, D, theta);
  Buffer dcs = f32_nan(half), dsn = f32_nan(half);
  be().rope_table(F(dcs), F(dsn), T, D, theta);
  EXPECT_REL_LE(get_f32(dcs, half), cs, kTolF32, "rope_table cos");
  EXPECT_REL_LE(get_f32(dsn, half), sn, kTolF32, "rope_table sin");

  const auto qkv = act_vals(randu(size_t(B) * T * W, 46));
  auto want = qkv;
  ref().rope_forward(want.data(), cs.data(), sn.data(), B, T, NH, NKV, D);
  Buffer d = act(qkv);
  be().rope_forward(d.data(), F(dcs), F(dsn), B, T, NH, NKV, D);
  EXPECT_REL_LE(get_act(d, qkv.size()), want, tol(kTolF32), "rope_forward");

  const auto g = act_vals(randu(qkv.size(), 47));
  auto gwant = g;
  ref().rope_backward(gwant.data(), cs.data(), sn.data(), B, T, NH, NKV, D);
  Buffer dg = act(g);
  be().rope_backward(dg.data(), F(dcs), F(dsn), B, T, NH, NKV, D);
  EXPECT_REL_LE(get_act(dg, g.size()), gwant, tol(kTolF32), "rope_backward");
}

TEST_P(CudaBackendTest, SwiGluAndBiasFreeResidual) {
  const int N = 23, F_ = 40;
  const auto gu = act_vals(randu(size_t(N) * 2 * F_, 48, -6.0f, 6.0f));
  std::vector<float> out(size_t(N) * F_);
  ref().swiglu_forward(out.data(), gu.data(), N, F_);
  Buffer dgu = act(gu), dout = act_nan(out.size());
  be().swiglu_forward(dout.data(), dgu.data(), N, F_);
  EXPECT_REL_LE(get_act(dout, out.size()), out, tol(kTolF32), "swiglu_forward");

  const auto g = act_vals(randu(out.size(), 49));
  std::vector<float> dgu_want(gu.size());
  ref().swiglu_backward(dgu_want.data(), g.data(), gu.data(), N, F_);
  Buffer dg = act(g), dgu_got = act_nan(gu.size());
  be().swiglu_backward(dgu_got.data(), dg.data(), dgu.data(), N, F_);
  EXPECT_REL_LE(get_act(dgu_got, gu.size()), dgu_want, tol(kTolF32), "swiglu_backward");

  // The row-parallel epilogue without a bias (llama): one rounding of resid + partial.
  const int C = 36;
  const auto r = act_vals(randu(size_t(N) * C, 50)), p = act_vals(randu(size_t(N) * C, 51));
  std::vector<float> o(r.size());
  ref().bias_residual(o.data(), r.data(), p.data(), nullptr, N, C);
  Buffer dr = act(r), dp = act(p), dres = act_nan(o.size());
  be().bias_residual(dres.data(), dr.data(), dp.data(), nullptr, N, C);
  EXPECT_TRUE(bitwise_equal(get_act(dres, o.size()), act_vals(o))) << "bias_residual, no bias";
}

}  // namespace
}  // namespace loom::cudatest
