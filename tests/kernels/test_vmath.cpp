// vmath: the vectorizable exp against libm's over its whole clamped range.
#include "kernels/vmath.h"

#include "kernel_test_util.h"

TEST(KernelVmath, ExpClampedWithinFourUlpOfDoubleExp) {
  double worst = 0.0;
  for (int i = -800000; i <= 800000; i++) {
    const float x = (float)i * 1e-4f;  // [-80, 80]
    const double want = std::exp((double)x);
    const double rel = std::fabs((double)loom::cpu::exp_clamped(x) - want) / want;
    worst = std::max(worst, rel);
  }
  EXPECT_LT(worst, 4 * 5.97e-8) << "worst relative error " << worst;
  EXPECT_EQ(loom::cpu::exp_clamped(0.0f), 1.0f);
  EXPECT_GT(loom::cpu::exp_clamped(-INFINITY), 0.0f);  // clamped to e^-80, a normal float
  EXPECT_LT(loom::cpu::exp_clamped(-INFINITY), 2e-35f);
}
