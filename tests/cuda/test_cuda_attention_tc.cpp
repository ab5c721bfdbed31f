// Tensor-core attention (bf16/fp16, head size 64 and 128) against the cpu twin, element by
// element within a derived error bound; determinism; and that the tensor-core path is taken.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "tests/cuda/cuda_test_util.h"
#ifdef LOOM_CUDA_EMULATE
#include "loom_emu/emulator.h"
#endif

namespace loom::cudatest {
namespace attention_tc {

struct Shape {
  int B, T, NH, HS;
};
// T not a multiple of the 64-row, 64- or 32-key tiles (1, 17, 77, 130), one that is (64);
// head sizes 64 and 128; several heads and batches.
const Shape kShapes[] = {{1, 1, 1, 64},   {2, 17, 3, 64},  {1, 77, 2, 128},
                         {1, 64, 1, 128}, {2, 130, 1, 64}, {1, 130, 2, 128}};

std::string name(const Shape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
         " HS=" + std::to_string(s.HS);
}

// Error model (all inputs are already rounded to the storage type, for both twins).
//  u   = unit roundoff of the storage type: 2^-8 (bf16), 2^-11 (fp16); a rounding errs by at
//        most u |x| + eta, eta = half the smallest subnormal step (fp16: 2^-25; bf16: 2^-134).
//        Rounded: the outputs, P before P V and P^T dO, dS before dS K and dS^T Q, and the
//        stored forward output from which delta = rowsum(dO O) is computed.
//  e32 = the fp32 work of both twins (dot products of length <= max(D, T), exp, log, the row
//        max shift): 4 (D + T + 16) 2^-24 (1 + A), A = the largest |scaled score| term sum
//        scale sum_d |q_d k_d|; the factor 4 covers both twins and the exp of an fp32 error.
// Per element, with exact (double) P, dP = dO V^T, delta and dS = P (dP - delta):
//  out_td: u |out| + eta + sum_s ((u + e32) P_ts + eta) |v_sd|                         =: E_td
//  delta_t error D_t = sum_d |dO_td| (E_td + e32 |out_td|)
//  dS_ts error F_ts = (u + e32) |dS| + eta + P_ts (D_t + e32 (sum_d |dO_td v_sd| + sum_s' P|dP|))
//  dq_td: u |dq| + eta + scale sum_s F_ts |k_sd|;  dk_sd: u |dk| + eta + scale sum_t F_ts |q_td|;
//  dv_sd: u |dv| + eta + sum_t ((u + e32) P_ts + eta) |dO_td|; each times (1 + u): the final
//  rounding of a value that is off by the bound.
struct Bounds {
  std::vector<double> out, dqkv;
};

Bounds error_bounds(const std::vector<float>& qkv, const std::vector<float>& dout,
                    const std::vector<float>& out, const std::vector<float>& dqkv, const Shape& sh,
                    double u, double eta) {
  const int T = sh.T, D = sh.HS, C = sh.NH * D, C3 = 3 * C;
  const double scale = 1.0 / std::sqrt((double)D);
  Bounds e{std::vector<double>(out.size()), std::vector<double>(dqkv.size())};
  std::vector<double> P((size_t)T * T), dP((size_t)T * T), F((size_t)T * T), Dt(T), sPdP(T);
  for (int b = 0; b < sh.B; b++)
    for (int h = 0; h < sh.NH; h++) {
      auto q = [&](int t, int d) { return (double)qkv[((size_t)b * T + t) * C3 + h * D + d]; };
      auto k = [&](int t, int d) { return (double)qkv[((size_t)b * T + t) * C3 + C + h * D + d]; };
      auto v = [&](int t, int d) {
        return (double)qkv[((size_t)b * T + t) * C3 + 2 * C + h * D + d];
      };
      auto go = [&](int t, int d) { return (double)dout[((size_t)b * T + t) * C + h * D + d]; };
      auto o = [&](int t, int d) { return (double)out[((size_t)b * T + t) * C + h * D + d]; };
      double A = 0.0;
      for (int t = 0; t < T; t++) {
        double mx = -INFINITY, sum = 0.0;
        for (int s = 0; s <= t; s++) {
          double dot = 0.0, mag = 0.0, dp = 0.0;
          for (int d = 0; d < D; d++) {
            dot += q(t, d) * k(s, d);
            mag += std::fabs(q(t, d) * k(s, d));
            dp += go(t, d) * v(s, d);
          }
          P[(size_t)t * T + s] = dot * scale;
          dP[(size_t)t * T + s] = dp;
          A = std::max(A, mag * scale);
          mx = std::max(mx, dot * scale);
        }
        for (int s = 0; s <= t; s++) sum += std::exp(P[(size_t)t * T + s] - mx);
        for (int s = 0; s <= t; s++)
          P[(size_t)t * T + s] = std::exp(P[(size_t)t * T + s] - mx) / sum;
      }
      const double e32 = 4.0 * (D + T + 16) * std::ldexp(1.0, -24) * (1.0 + A);
      for (int t = 0; t < T; t++) {
        double delta = 0.0;
        sPdP[t] = 0.0;
        for (int s = 0; s <= t; s++) {
          delta += P[(size_t)t * T + s] * dP[(size_t)t * T + s];
          sPdP[t] += std::fabs(P[(size_t)t * T + s] * dP[(size_t)t * T + s]);
        }
        Dt[t] = 0.0;
        for (int d = 0; d < D; d++) {
          double pv = 0.0, av = 0.0;
          for (int s = 0; s <= t; s++) {
            pv += P[(size_t)t * T + s] * std::fabs(v(s, d));
            av += std::fabs(v(s, d));
          }
          const double E = u * std::fabs(o(t, d)) + eta + (u + e32) * pv + eta * av;
          e.out[((size_t)b * T + t) * C + h * D + d] = E * (1 + u);
          Dt[t] += std::fabs(go(t, d)) * (E + e32 * std::fabs(o(t, d)));
        }
        for (int s = 0; s <= t; s++) {
          const double p = P[(size_t)t * T + s], ds = p * (dP[(size_t)t * T + s] - delta);
          double dov = 0.0;
          for (int d = 0; d < D; d++) dov += std::fabs(go(t, d) * v(s, d));
          F[(size_t)t * T + s] =
              (u + e32) * std::fabs(ds) + eta + p * (Dt[t] + e32 * (dov + sPdP[t]));
        }
      }
      for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) {
          double fq = 0.0, fk = 0.0, fv = 0.0, ag = 0.0;
          for (int s = 0; s <= t; s++) fq += F[(size_t)t * T + s] * std::fabs(k(s, d));
          for (int r = t; r < T; r++) {  // key t of the dk, dv rows: queries r >= t
            fk += F[(size_t)r * T + t] * std::fabs(q(r, d));
            fv += P[(size_t)r * T + t] * std::fabs(go(r, d));
            ag += std::fabs(go(r, d));
          }
          const size_t row = ((size_t)b * T + t) * C3 + h * D + d;
          e.dqkv[row] = u * std::fabs(dqkv[row]) + eta + scale * fq;
          e.dqkv[row + C] = u * std::fabs(dqkv[row + C]) + eta + scale * fk;
          e.dqkv[row + 2 * C] = u * std::fabs(dqkv[row + 2 * C]) + eta + (u + e32) * fv + eta * ag;
          for (size_t i : {row, row + C, row + 2 * (size_t)C}) e.dqkv[i] *= 1 + u;
        }
    }
  return e;
}

// Every |got - want| within its bound; the worst ratio is reported.
void expect_within(const std::vector<float>& got, const std::vector<float>& want,
                   const std::vector<double>& bound, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0.0;
  size_t at = 0, bad = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const double err = std::fabs((double)got[i] - (double)want[i]);
    const double r = err / (bound[i] + 1e-30);
    if (!(err <= bound[i])) bad++;
    if (!(r <= worst)) worst = r, at = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": worst element " << at << " got " << got[at] << " want "
                     << want[at] << " bound " << bound[at] << " (ratio " << worst << ")";
}

template <typename T>
class CudaAttentionTc : public CudaTest {};
TYPED_TEST_SUITE(CudaAttentionTc, LowpTypes, TypeNames);

TYPED_TEST(CudaAttentionTc, MatchesCpuWithinErrorModel) {
  using T = TypeParam;
  const std::string ty = type_name<T>();
  const double u = std::ldexp(1.0, per_type<T>(-8, -11)),
               eta = std::ldexp(1.0, per_type<T>(-134, -25));
  for (const Shape& s : kShapes) {
    const int C = s.NH * s.HS;
    const size_t n_qkv = (size_t)s.B * s.T * 3 * C, n_out = (size_t)s.B * s.T * C;
    const size_t n_row = (size_t)s.B * s.NH * s.T;
    const auto qkv = round_to<T>(randu(n_qkv, per_type<T>(31u, 37u), -2.0f, 2.0f));
    const auto dout = round_to<T>(randu(n_out, per_type<T>(32u, 38u)));
    std::vector<float> out(n_out), dqkv(n_qkv), att((size_t)s.B * s.NH * s.T * s.T);
    std::vector<float> scratch(att.size());
    cpu::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, C, s.NH);
    cpu::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), s.B,
                            s.T, C, s.NH);
    const Bounds e = error_bounds(qkv, dout, out, dqkv, s, u, eta);
    DevBuf<T> hQkv(convert<T>(qkv)), hOut(n_out), hDout(convert<T>(dout)), hDqkv(n_qkv);
    DevBuf<float> dLse(n_row), dDelta(n_row);
    cuda::attention_forward(hOut.get(), dLse.get(), hQkv.get(), s.B, s.T, C, s.NH, nullptr);
    cuda::attention_backward(hDqkv.get(), dDelta.get(), hDout.get(), hQkv.get(), hOut.get(),
                             dLse.get(), s.B, s.T, C, s.NH, nullptr);
    expect_within(to_f32(hOut.download()), out, e.out, ty + " out " + name(s));
    expect_within(to_f32(hDqkv.download()), dqkv, e.dqkv, ty + " dqkv " + name(s));
  }
}

// Two runs give the same bits (no atomics, a fixed order of every sum).
TYPED_TEST(CudaAttentionTc, RunsAreBitwiseIdentical) {
  using T = TypeParam;
  const Shape s{2, 77, 2, 64};
  const int C = s.NH * s.HS;
  const size_t n_qkv = (size_t)s.B * s.T * 3 * C, n_out = (size_t)s.B * s.T * C;
  const size_t n_row = (size_t)s.B * s.NH * s.T;
  DevBuf<T> hQkv(convert<T>(randu(n_qkv, 41, -2.0f, 2.0f))), hDout(convert<T>(randu(n_out, 42)));
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; run++) {
    DevBuf<T> hOut(n_out), hDqkv(n_qkv);
    DevBuf<float> dLse(n_row), dDelta(n_row);
    cuda::attention_forward(hOut.get(), dLse.get(), hQkv.get(), s.B, s.T, C, s.NH, nullptr);
    cuda::attention_backward(hDqkv.get(), dDelta.get(), hDout.get(), hQkv.get(), hOut.get(),
                             dLse.get(), s.B, s.T, C, s.NH, nullptr);
    std::vector<float> all = to_f32(hOut.download());
    const auto l = dLse.download(), g = to_f32(hDqkv.download());
    all.insert(all.end(), l.begin(), l.end());
    all.insert(all.end(), g.begin(), g.end());
    runs.push_back(all);
  }
  EXPECT_TRUE(bitwise_equal(runs[0], runs[1]));
}

TEST(CudaAttentionTcPath, TakenForBf16AndFp16WithHeadSize64And128Only) {
  EXPECT_TRUE(cuda::attention_uses_tensor_cores(64, 2));
  EXPECT_TRUE(cuda::attention_uses_tensor_cores(128, 2));
  EXPECT_FALSE(cuda::attention_uses_tensor_cores(32, 2));
  EXPECT_FALSE(cuda::attention_uses_tensor_cores(16, 2));
  EXPECT_FALSE(cuda::attention_uses_tensor_cores(64, 4)) << "fp32 keeps the fp32 kernel";
#ifdef LOOM_CUDA_EMULATE
  // The launches themselves: the tensor-core kernels run exactly for those cases.
  auto runs_tc = [](auto zero, int HS) {
    using T = decltype(zero);
    const int B = 1, Tn = 5, NH = 2, C = NH * HS;
    DevBuf<T> qkv(convert<T>(randu((size_t)B * Tn * 3 * C, 5))), out((size_t)B * Tn * C);
    DevBuf<T> dqkv((size_t)B * Tn * 3 * C);
    DevBuf<float> lse((size_t)B * NH * Tn), delta((size_t)B * NH * Tn);
    const uint64_t before = loom_emu::launches_of("tc_attention_");
    cuda::attention_forward(out.get(), lse.get(), qkv.get(), B, Tn, C, NH, nullptr);
    cuda::attention_backward(dqkv.get(), delta.get(), out.get(), qkv.get(), out.get(), lse.get(), B,
                             Tn, C, NH, nullptr);
    sync();
    return loom_emu::launches_of("tc_attention_") - before;
  };
  EXPECT_EQ(runs_tc(bf16{}, 64), 3u) << "forward, dQ, dK/dV";
  EXPECT_EQ(runs_tc(f16{}, 128), 3u);
  EXPECT_EQ(runs_tc(bf16{}, 32), 0u);
  EXPECT_EQ(runs_tc(0.0f, 64), 0u);
#endif
}

}  // namespace attention_tc
}  // namespace loom::cudatest
