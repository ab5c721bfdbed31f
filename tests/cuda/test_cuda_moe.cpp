// Mixture-of-Experts routing, cuda twins vs the cpu twins: integers (choices, plans) equal, floats
// within fp32 bounds, on routings with ties, with capacity dropping and dropless, k = 1 and 2.
#include <string>
#include <vector>

#include "kernels/moe.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace moe {

using cpu::MoeDims;

// B = 3 sequences of T = 8 tokens, E = 4 experts; cap 3 drops (expert 0 is favoured), cap 0 is
// dropless.
const MoeDims kCases[] = {{3, 8, 4, 1, 0}, {3, 8, 4, 2, 0}, {3, 8, 4, 2, 3}, {3, 8, 4, 1, 2}};
constexpr int kC = 40;  // row width: more than one element per lane of a warp

std::string name(const MoeDims& d) {
  return "k=" + std::to_string(d.k) + " cap=" + std::to_string(d.cap);
}

// Logits (N, E) with ties: every 4th token all equal, every 4th + 1 a tie between experts 1 and
// 3 at the top; expert 0 favoured elsewhere so that a capacity drops assignments.
std::vector<float> tied_logits(const MoeDims& d) {
  std::vector<float> x = randu(size_t(d.N()) * d.E, 91, -1.0f, 1.0f);
  for (int t = 0; t < d.N(); ++t) {
    float* r = x.data() + size_t(t) * d.E;
    if (t % 4 == 0) {
      for (int e = 0; e < d.E; ++e) r[e] = 0.25f;
    } else if (t % 4 == 1) {
      r[1] = r[3] = 2.0f;
    } else {
      r[0] += 1.5f;
    }
  }
  return x;
}

// A routing and its plan from the cpu twins (the inputs of the kernels after them).
struct Routing {
  std::vector<float> probs, lse, gate;
  std::vector<int32_t> choice, slot, offsets, rows, counts;
  int M = 0;
};

Routing cpu_routing(const MoeDims& d) {
  Routing r;
  const size_t N = size_t(d.N());
  r.probs.resize(N * d.E), r.lse.resize(N), r.gate.resize(N * d.k), r.choice.resize(N * d.k);
  r.slot.resize(N * d.k), r.offsets.resize(size_t(d.E) + 1), r.rows.resize(N * d.k);
  r.counts.resize(size_t(d.B) * d.E);
  const std::vector<float> logits = tied_logits(d);
  cpu::moe_router_forward(r.probs.data(), r.lse.data(), r.choice.data(), r.gate.data(),
                          logits.data(), d);
  r.M = cpu::moe_plan(r.slot.data(), r.offsets.data(), r.rows.data(), r.counts.data(),
                      r.choice.data(), d);
  return r;
}

class CudaMoe : public CudaTest {};

// Router: the softmax is computed in double on both sides and rounded to fp32, so probs, lse and
// gate agree to the last bit but for the libraries' exp/log (1 ulp of a double): kTolF32 bounds
// it with room. The choices are integers: equal, ties to the lower expert included.
TEST_F(CudaMoe, RouterAndPlanMatchCpuExactly) {
  for (const MoeDims& d : kCases) {
    const Routing r = cpu_routing(d);
    const size_t N = size_t(d.N());
    ASSERT_EQ(r.choice[0], 0) << "an all-tied token picks expert 0 first";
    ASSERT_EQ(r.choice[size_t(1) * d.k], 1) << "a 1-3 tie picks expert 1 first";
    DevBuf<float> logits(tied_logits(d)), probs(N * d.E), lse(N), gate(N * d.k);
    DevBuf<int32_t> choice(N * d.k), slot(N * d.k), offsets(size_t(d.E) + 1), rows(N * d.k),
        counts(size_t(d.B) * d.E), work(cuda::moe_plan_work_ints(d));
    cuda::moe_router_forward(probs.get(), lse.get(), choice.get(), gate.get(), logits.get(), d,
                             nullptr);
    EXPECT_EQ(choice.download(), r.choice) << name(d);
    EXPECT_REL_LE(probs.download(), r.probs, kTolF32, name(d) + " probs");
    EXPECT_REL_LE(lse.download(), r.lse, kTolF32, name(d) + " lse");
    EXPECT_REL_LE(gate.download(), r.gate, kTolF32, name(d) + " gate");
    // The plan from the cpu's choices (rows past M are not written: compare [0, M)).
    choice.upload(r.choice);
    const int M = cuda::moe_plan(slot.get(), offsets.get(), rows.get(), counts.get(), choice.get(),
                                 d, work.get(), nullptr);
    EXPECT_EQ(M, r.M) << name(d);
    EXPECT_EQ(slot.download(), r.slot) << name(d);
    EXPECT_EQ(offsets.download(), r.offsets) << name(d);
    EXPECT_EQ(counts.download(), r.counts) << name(d);
    const std::vector<int32_t> got_rows = rows.download();
    EXPECT_EQ(std::vector<int32_t>(got_rows.begin(), got_rows.begin() + M),
              std::vector<int32_t>(r.rows.begin(), r.rows.begin() + r.M))
        << name(d);
    if (d.cap > 0) {
      EXPECT_LT(r.M, d.N() * d.k) << name(d) << ": the case must drop";
    }
  }
}

// Losses: double sums in another order (per thread, then a tree): relative 1e-12 is 10^4 double
// roundoffs. Router backward: double arithmetic rounded to fp32 (kTolF32).
TEST_F(CudaMoe, LossesAndRouterBackwardMatchCpu) {
  for (const MoeDims& d : kCases) {
    const Routing r = cpu_routing(d);
    const size_t N = size_t(d.N());
    const std::vector<float> dgate_h = randu(N * d.k, 92);
    const double aux = 0.01, zc = 0.001, sw = 0.5, tw = 0.25;
    std::vector<double> acc = {1.0, 2.0};
    cpu::moe_losses(acc.data(), r.probs.data(), r.lse.data(), r.counts.data(), d, aux, zc, sw, tw);
    std::vector<float> dlogits(N * d.E);
    cpu::moe_router_backward(dlogits.data(), r.probs.data(), r.lse.data(), r.choice.data(),
                             r.slot.data(), dgate_h.data(), r.counts.data(), d, aux, zc, sw, tw);
    DevBuf<double> hacc(std::vector<double>{1.0, 2.0});
    DevBuf<float> probs(r.probs), lse(r.lse), dgate(dgate_h), hdl(N * d.E);
    DevBuf<int32_t> counts(r.counts), choice(r.choice), slot(r.slot);
    cuda::moe_losses(hacc.get(), probs.get(), lse.get(), counts.get(), d, aux, zc, sw, tw, nullptr);
    const std::vector<double> got = hacc.download();
    for (int i = 0; i < 2; ++i)
      EXPECT_NEAR(got[size_t(i)], acc[size_t(i)], 1e-12 * std::abs(acc[size_t(i)]))
          << name(d) << " loss " << i;
    EXPECT_GT(acc[0], 1.0) << "the balancing term adds something";
    cuda::moe_router_backward(hdl.get(), probs.get(), lse.get(), choice.get(), slot.get(),
                              dgate.get(), counts.get(), d, aux, zc, sw, tw, nullptr);
    EXPECT_REL_LE(hdl.download(), dlogits, kTolF32, name(d) + " dlogits");
  }
}

template <typename T>
class CudaMoeRows : public CudaTest {};
TYPED_TEST_SUITE(CudaMoeRows, Fp32AndLowpTypes, TypeNames);

// Gather (a copy: equal bits), combine and its backward, scatter-add on inputs rounded to T.
// Every sum is fp32 on both sides (at most k terms, or a dot of C, or N*k terms of dbias) in the
// same or another order: kTolF32; outputs stored as T: type_tol<T>().
TYPED_TEST(CudaMoeRows, MatchCpu) {
  using T = TypeParam;
  for (const MoeDims& d : kCases) {
    const std::string what = type_name<T>() + " " + name(d);
    const Routing r = cpu_routing(d);
    const size_t N = size_t(d.N()), M = size_t(r.M), C = kC;
    const auto x = round_to<T>(randu(N * C, 93, -2.0f, 2.0f));
    const auto y = round_to<T>(randu(M * C, 94, -2.0f, 2.0f));
    const auto bias = round_to<T>(randu(size_t(d.E) * C, 95));
    const auto dout = round_to<T>(randu(N * C, 96));
    const auto dx0 = round_to<T>(randu(N * C, 97));
    const auto db0 = randu(size_t(d.E) * C, 98);
    DevBuf<int32_t> rows(r.rows), slot(r.slot), choice(r.choice);
    DevBuf<float> gate(r.gate);

    std::vector<float> xp(M * C);
    cpu::moe_gather_rows(xp.data(), x.data(), r.rows.data(), r.M, kC, sizeof(float));
    DevBuf<T> hx(convert<T>(x)), hxp(M * C);
    cuda::moe_gather_rows(hxp.get(), hx.get(), rows.get(), r.M, kC, sizeof(T), nullptr);
    EXPECT_TRUE(to_f32(hxp.download()) == xp) << what << " gather";

    std::vector<float> out(N * C);
    cpu::moe_combine(out.data(), y.data(), bias.data(), r.slot.data(), r.choice.data(),
                     r.gate.data(), d, kC);
    DevBuf<T> hy(convert<T>(y)), hb(convert<T>(bias)), hout(N * C);
    cuda::moe_combine(hout.get(), hy.get(), hb.get(), slot.get(), choice.get(), gate.get(), d, kC,
                      nullptr);
    EXPECT_REL_LE(to_f32(hout.download()), out, type_tol<T>(), what + " combine");

    std::vector<float> dy(M * C), dgate(N * d.k), db = db0;
    cpu::moe_combine_backward(dy.data(), dgate.data(), db.data(), dout.data(), y.data(),
                              bias.data(), r.slot.data(), r.choice.data(), r.gate.data(), d, kC);
    DevBuf<T> hdout(convert<T>(dout)), hdy(M * C);
    DevBuf<float> hdgate(N * d.k), hdb(db0);
    cuda::moe_combine_backward(hdy.get(), hdgate.get(), hdb.get(), hdout.get(), hy.get(), hb.get(),
                               slot.get(), choice.get(), gate.get(), d, kC, nullptr);
    EXPECT_REL_LE(to_f32(hdy.download()), dy, type_tol<T>(), what + " dy");
    EXPECT_REL_LE(hdgate.download(), dgate, kTolF32, what + " dgate");
    EXPECT_REL_LE(hdb.download(), db, kTolF32, what + " dbias");

    std::vector<float> dx = dx0;
    cpu::moe_scatter_add_rows(dx.data(), y.data(), r.rows.data(), r.M, kC);
    DevBuf<T> hdx(convert<T>(dx0));
    cuda::moe_scatter_add_rows(hdx.get(), hy.get(), slot.get(), d, kC, nullptr);
    EXPECT_REL_LE(to_f32(hdx.download()), dx, type_tol<T>(), what + " scatter-add");
  }
}

}  // namespace moe
}  // namespace loom::cudatest
