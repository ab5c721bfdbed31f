// add_inplace and global-norm cpu twins against plain double loops.
#include "kernel_test_util.h"
#include "kernels/add_inplace.h"
#include "kernels/global_norm.h"

using namespace loom::ktest;

namespace {
constexpr size_t kBig = (1 << 16) + 7;  // above the kernels' parallel threshold, odd tail
}

TEST(KernelAddInplace, MatchesDoubleSum) {
  auto a = randu(kBig, 1), b = randu(kBig, 2);
  std::vector<double> want(kBig);
  for (size_t i = 0; i < kBig; i++) want[i] = (double)a[i] + b[i];
  loom::cpu::add_inplace(a.data(), b.data(), kBig);
  expect_close(a, want, 1e-7, 0.0, "add_inplace");  // one correctly rounded add
}

TEST(KernelGlobalNorm, SumSquaresAndScale) {
  auto x = randu(kBig, 3);
  double want = 0.0;
  for (float f : x) want += (double)f * f;
  // Accumulated in double: only the summation order differs from the loop above.
  EXPECT_NEAR(loom::cpu::sum_squares(x.data(), kBig), want, 1e-12 * want);
  EXPECT_EQ(loom::cpu::sum_squares(x.data(), 0), 0.0);
  std::vector<double> scaled(kBig);
  for (size_t i = 0; i < kBig; i++) scaled[i] = (double)x[i] * 0.3f;
  loom::cpu::scale_inplace(x.data(), 0.3f, kBig);
  expect_close(x, scaled, 1e-7, 0.0, "scale_inplace");
}
