// The grouped expert GEMMs' cpu twin against the double reference, within the fp32 bound of each
// element (tests/support/grouped_reference.h).
#include "kernel_test_util.h"
#include "kernels/grouped_matmul.h"
#include "tests/support/grouped_reference.h"

using namespace loom::ktest;
using loom::cpu::GemmSegment;

namespace {

constexpr int IC = 24, OC = 40, E = 4, R = loom::test::kGroupedRows;

TEST(KernelGroupedMatmul, ForwardAndBackwardWithinFp32Bounds) {
  for (bool repeated : {false, true})
    for (bool with_bias : {false, true}) {
      const std::vector<GemmSegment> segs = loom::test::test_segments(repeated);
      const std::vector<float> inp = randu(size_t(R) * IC, 5, -1.0f, 1.0f);
      const std::vector<float> w = randu(size_t(E) * IC * OC, 6, -0.5f, 0.5f);
      const std::vector<float> bias = randu(size_t(E) * OC, 7, -1.0f, 1.0f);
      std::vector<float> out = randu(size_t(R) * OC, 8, -3.0f, 3.0f);  // rows 16, 17 kept
      const auto want =
          loom::test::grouped_forward_ref(out, inp, w, with_bias ? &bias : nullptr, segs, IC, OC);
      loom::cpu::grouped_matmul_forward(out.data(), inp.data(), w.data(),
                                        with_bias ? bias.data() : nullptr, segs, IC, OC);
      EXPECT_EQ(loom::test::outside_bound(out, want), "") << "forward, repeated " << repeated;

      const std::vector<float> dout = randu(size_t(R) * OC, 9, -1.0f, 1.0f);
      std::vector<float> dw = randu(w.size(), 10, -0.1f, 0.1f), db = randu(bias.size(), 11);
      std::vector<float> dinp(size_t(R) * IC, 0.0f);
      const auto g = loom::test::grouped_backward_ref(dw, db, dout, inp, w, segs, R, IC, OC);
      loom::cpu::grouped_matmul_backward(dinp.data(), dw.data(), with_bias ? db.data() : nullptr,
                                         dout.data(), inp.data(), w.data(), segs, IC, OC);
      EXPECT_EQ(loom::test::outside_bound(dinp, g.dinp), "") << "dinp";
      EXPECT_EQ(loom::test::outside_bound(dw, g.dw), "") << "dw, repeated " << repeated;
      if (with_bias) {
        EXPECT_EQ(loom::test::outside_bound(db, g.dbias), "") << "dbias";
      }
    }
}

}  // namespace
