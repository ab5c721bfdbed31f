// adamw cpu twin: three steps against a scalar double re-implementation of torch.optim.AdamW.
#include "kernels/adamw.h"

#include "kernel_test_util.h"

using namespace loom::ktest;

namespace {

struct Case {
  float weight_decay, grad_scale;
};

// torch.optim.AdamW (single tensor) in double, from the same fp32 hyper-parameters.
void ref_adamw(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
               const std::vector<float>& grad, const loom::cpu::AdamWParams& hp) {
  const double lr = hp.lr, b1 = hp.beta1, b2 = hp.beta2, eps = hp.eps, wd = hp.weight_decay;
  const double bc1 = 1.0 - std::pow(b1, hp.step), bc2 = 1.0 - std::pow(b2, hp.step);
  for (size_t i = 0; i < p.size(); i++) {
    const double g = (double)grad[i] * hp.grad_scale;
    p[i] *= 1.0 - lr * wd;
    m[i] = b1 * m[i] + (1.0 - b1) * g;
    v[i] = b2 * v[i] + (1.0 - b2) * g * g;
    p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
  }
}

void run_case(const Case& cs) {
  const size_t n = 257;
  auto p = randu(n, 1);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<double> pd = to_double(p), md(n, 0.0), vd(n, 0.0);
  // eps 1e-3 with some gradients near 1e-3 makes the placement of eps visible; lr 0.05 makes
  // the bias corrections and the decay move the parameters by far more than the tolerance.
  loom::cpu::AdamWParams hp{0.05f, 0.9f, 0.95f, 1e-3f, cs.weight_decay, 0, cs.grad_scale};
  for (int step = 1; step <= 3; step++) {
    auto g = randu(n, 10 + step);
    for (size_t i = 0; i < n; i += 3) g[i] *= 1e-3f;
    hp.step = step;
    loom::cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp);
    ref_adamw(pd, md, vd, g, hp);
  }
  // fp32 arithmetic over 3 steps, a handful of roundings per step each ~6e-8 relative; the
  // division by a small denom can amplify m's rounding, so 1e-5 relative (and an absolute
  // floor of 1e-6 of the largest value) still separates rounding from formula errors.
  const std::string tag = " (wd " + std::to_string(cs.weight_decay) + ", grad_scale " +
                          std::to_string(cs.grad_scale) + ")";
  expect_close(p, pd, 1e-5, 1e-6, "param" + tag);
  expect_close(m, md, 1e-5, 1e-6, "exp_avg" + tag);
  expect_close(v, vd, 1e-5, 1e-6, "exp_avg_sq" + tag);
}

}  // namespace

TEST(KernelAdamW, ThreeStepsWithWeightDecayAndGradScale) { run_case({0.1f, 0.37f}); }
TEST(KernelAdamW, ThreeStepsWithoutWeightDecay) { run_case({0.0f, 0.37f}); }
TEST(KernelAdamW, ThreeStepsUnitGradScale) { run_case({0.1f, 1.0f}); }
