// The grouped expert GEMMs' cuda twin (cuBLAS grouped batched GEMM, bias and bias-gradient
// kernels) against the double reference, within the fp32 bound of each element; an expert with
// two segments accumulates both into its weight gradient (in separate grouped calls).
#include <vector>

#include "kernels/grouped_matmul.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/grouped_reference.h"

namespace loom::cudatest {
namespace {

using cpu::GemmSegment;
constexpr int IC = 24, OC = 40, E = 4, R = test::kGroupedRows;

class CudaGroupedMatmul : public CudaTest {};

TEST_F(CudaGroupedMatmul, ForwardAndBackwardWithinFp32Bounds) {
  cuda::GroupedGemm gg;
  for (bool repeated : {false, true})
    for (bool with_bias : {false, true}) {
      const std::vector<GemmSegment> segs = test::test_segments(repeated);
      const std::vector<float> inp = randu(size_t(R) * IC, 5, -1.0f, 1.0f);
      const std::vector<float> w = randu(size_t(E) * IC * OC, 6, -0.5f, 0.5f);
      const std::vector<float> bias = randu(size_t(E) * OC, 7, -1.0f, 1.0f);
      const std::vector<float> out0 = randu(size_t(R) * OC, 8, -3.0f, 3.0f);
      const auto want =
          test::grouped_forward_ref(out0, inp, w, with_bias ? &bias : nullptr, segs, IC, OC);
      DevBuf<float> d_inp(inp), d_w(w), d_bias(bias), d_out(out0);
      cuda::grouped_matmul_forward(gg, d_out.get(), d_inp.get(), d_w.get(),
                                   with_bias ? d_bias.get() : nullptr, segs, IC, OC, nullptr);
      EXPECT_EQ(test::outside_bound(d_out.download(), want), "")
          << "forward, repeated " << repeated << ", bias " << with_bias;

      const std::vector<float> dout = randu(size_t(R) * OC, 9, -1.0f, 1.0f);
      const std::vector<float> dw0 = randu(w.size(), 10, -0.1f, 0.1f), db0 = randu(bias.size(), 11);
      const auto g = test::grouped_backward_ref(dw0, db0, dout, inp, w, segs, R, IC, OC);
      DevBuf<float> d_dout(dout), d_dw(dw0), d_db(db0), d_dinp(size_t(R) * IC);
      cuda::grouped_matmul_backward(gg, d_dinp.get(), d_dw.get(), with_bias ? d_db.get() : nullptr,
                                    d_dout.get(), d_inp.get(), d_w.get(), segs, IC, OC, nullptr);
      // Rows in no segment: dinp is not written there; compare the segments' rows only.
      std::vector<float> dinp = d_dinp.download();
      dinp.resize(size_t(16) * IC);
      test::Bounded want_dinp = g.dinp;
      want_dinp.value.resize(dinp.size()), want_dinp.absum.resize(dinp.size());
      want_dinp.terms.resize(dinp.size());
      EXPECT_EQ(test::outside_bound(dinp, want_dinp), "") << "dinp, repeated " << repeated;
      EXPECT_EQ(test::outside_bound(d_dw.download(), g.dw), "") << "dw, repeated " << repeated;
      if (with_bias) {
        EXPECT_EQ(test::outside_bound(d_db.download(), g.dbias), "") << "dbias";
      }
    }
}

// Nothing to do: no segments, no call (and no error).
TEST_F(CudaGroupedMatmul, NoSegments) {
  cuda::GroupedGemm gg;
  DevBuf<float> x(8);
  cuda::grouped_matmul_forward(gg, x.get(), x.get(), x.get(), nullptr, {}, 2, 4, nullptr);
  cuda::grouped_matmul_backward(gg, x.get(), x.get(), x.get(), x.get(), x.get(), x.get(), {}, 2, 4,
                                nullptr);
}

}  // namespace
}  // namespace loom::cudatest
