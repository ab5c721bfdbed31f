// Tolerance classes of the numerical tests, each bound beside its error model (docs/testing.md).
#pragma once
#include <cmath>
#include <cstddef>
#include <map>
#include <string>
#include <utility>

#include "ckpt/canonical.h"
#include "tests/support/compare.h"

namespace loom::test {

// fp32 unit roundoff: one rounding changes a value by at most u relative.
constexpr double kFp32U = 0x1p-24;  // 5.96e-8

// ---- Runs that compute the same training in fp32 but sum in another order ----------------
// Layouts (tp partial sums, dp reductions, micro-batch accumulation, pipeline stages), overlap
// on/off, a resume onto another layout. No bound depends on the BLAS kernel family: each is
// stated from the length of the reordered sums and what AdamW does with the difference.

// Step 1's loss (same weights, forward only). Each logit is a reordered sum of C = 32..34
// products, off by at most C*u of its magnitude sum (2e-6); the loss is a mean of N = 64
// log-softmax terms with slope <= 1 in each logit, so the worst case is 2e-6 of the logit
// scale, here under 1e-6 of the loss. Measured: <= 1e-8.
constexpr double kReorderFirstLoss = 1e-5;

// Step 1's gradient, norm-wise per tensor. Each gradient element sums the N = 64 token
// contributions (in an order set by micro-batches, dp and tp): off by at most (N-1)*u = 3.8e-6
// of the magnitude sum, and a tensor's norm is not dominated by elements that cancel (the key
// bias, whose gradient is zero in exact arithmetic, is left out). Measured: <= 5e-7.
constexpr double kReorderGrad = 1e-5;

// Differences start at rounding level (the two classes above) and grow along the trajectory
// by a factor that belongs to the trajectory (model, seed, learning rate), not to the machine:
// measured on this test model for 12 seeds x 3 layouts x 2 OpenBLAS kernel families, 10 steps
// at lr 1e-2, the largest drift was 2.1e-4 (loss) and 1.5e-2 (weights, units below), for the
// seed the tests use 6.5e-6 and 6e-4, and the same seed differed by at most 12x between kernel
// families. One wrong sample out of the 80 (as a layout that misroutes data would have) moves
// the loss by >= 6e-3 and the weights by >= 0.6 (test Equivalence.BoundsCatchOneWrongSample).

// Weights after k steps: max |w_a - w_b| per element, in units of S = sum of the k learning
// rates (an AdamW step moves an element by about lr, whatever its gradient's scale: a relative
// gradient difference rho moves the update by about rho*lr, and near a zero gradient the
// update's slope in g is at most lr/eps, so rounding cannot flip a whole step). 5e-2 of S.
constexpr double kReorderWeightSteps = 5e-2;

// Loss of every step after the first, relative. 1e-3.
constexpr double kReorderLoss = 1e-3;

// ---- fp32 against a float64 reference of the same math (PyTorch fixtures) -----------------
// Forward values (logits, loss): sums of C = 32 products and a softmax over 97 entries, each
// off by at most ~n*u of its magnitude sum; norm-wise 1e-6 is 2x the worst case of n = 8..16
// effective terms and 10x what is measured (~1e-7).
constexpr double kRefForward = 1e-6;
// Gradients, norm-wise per tensor: the backward chains 2 layers of such sums (n <= 128 at the
// vocab) and the N = 16 token sum: (128 + 16) * u = 8.6e-6 worst case. Measured: ~1e-6.
constexpr double kRefGrad = 1e-5;
// Weights after 3 clipped AdamW steps, max |w - w_ref| in units of S = sum of lr: fp32
// gradients off by rho <= 1e-5 (above) move each update by about rho*lr, plus the fp32
// rounding of the update itself (u relative to w). Bound 1e-3 = 100x rho.
constexpr double kRefWeightSteps = 1e-3;

// ---- Comparisons -----------------------------------------------------------------------
// Both take canonical tensors (checkpoint names, unpadded). The key part of attn.c_attn.bias
// (columns [C, 2C)) is left out: adding a constant to every key shifts each score row by a
// constant, which softmax ignores, so its gradient is zero in exact arithmetic and rounding
// noise in any finite precision.
struct WorstTensor {
  double value = 0;
  std::string name;
};

// Worst norm-wise relative difference ||a - b|| / ||b|| over tensors.
WorstTensor worst_relative(const std::map<std::string, CanonicalTensor>& got,
                           const std::map<std::string, CanonicalTensor>& ref, int d_model);

// Worst max |a - b| over tensors, divided by `steps_lr` (the sum of the learning rates).
WorstTensor worst_in_steps(const std::map<std::string, CanonicalTensor>& got,
                           const std::map<std::string, CanonicalTensor>& ref, int d_model,
                           double steps_lr);

// True for the element of a canonical tensor whose gradient is zero in exact arithmetic.
bool structurally_zero_gradient(const std::string& name, size_t i, int d_model);

// max |a[i] - b[i]| over the n elements of canonical tensor `name`, the structurally zero
// gradients left out; NaN when any difference is NaN.
template <typename A, typename B>
double max_abs_diff(const std::string& name, const A* a, const B* b, size_t n, int d_model) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) {
    if (structurally_zero_gradient(name, i, d_model)) continue;
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (worse(d, m)) m = d;
  }
  return m;
}

}  // namespace loom::test
