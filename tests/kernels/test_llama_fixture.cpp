// Llama ops cpu twins (rmsnorm, rope, swiglu, grouped-query attention) vs a PyTorch float64
// fixture.
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/attention.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "tests/support/fixture.h"

using namespace loom::ktest;
using loom::test::read_h5;

namespace {

// tests/reference/make_llama_op_fixtures.py: inputs are float32 values (stored as float32), the
// outputs and gradients float64 from autograd of L = sum(out * dout).
const std::string kFile = loom::test::source_path("tests/reference/fixtures/llama_ops_fixture.h5");

std::vector<float> load_f32(const std::string& name, std::vector<size_t>* shape = nullptr) {
  const auto d = read_h5(kFile, name, shape);
  return std::vector<float>(d.begin(), d.end());  // exact: the fixture's inputs are fp32 values
}

struct Heads {
  int B, T, NH, NKV, D;
};
Heads dims(const std::string& group) {
  const auto v = read_h5(kFile, group + "/dims");
  EXPECT_EQ(v.size(), 5u) << group << "/dims";
  return Heads{(int)v.at(0), (int)v.at(1), (int)v.at(2), (int)v.at(3), (int)v.at(4)};
}

}  // namespace

// Tolerances: kernel_test_util.h's error model. Each result is a chain of fp32 sums over at most
// 40 terms (C = 20 channels, T <= 7 positions times D <= 8, group * T for dK/dV) on exactly the
// fixture's inputs, and the reference is exact to ~1e-15, so only loom's fp32 rounding counts.
TEST(KernelLlamaFixture, RmsnormMatchesTorch) {
  std::vector<size_t> sh;
  auto x = load_f32("rmsnorm/x", &sh), w = load_f32("rmsnorm/w"), g = load_f32("rmsnorm/dout");
  ASSERT_EQ(sh.size(), 2u);
  const int N = (int)sh[0], C = (int)sh[1];
  const float eps = (float)read_h5(kFile, "rmsnorm/eps").at(0);
  std::vector<float> out((size_t)N * C), rstd(N), dx((size_t)N * C, 0.0f), dw(C, 0.0f);
  loom::cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  loom::cpu::rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), N,
                              C);
  expect_close(out, read_h5(kFile, "rmsnorm/out"), kFwdRtol, kFwdAtol, "rmsnorm out");
  expect_close(rstd, read_h5(kFile, "rmsnorm/rstd"), kFwdRtol, 0.0, "rmsnorm rstd");
  expect_close(dx, read_h5(kFile, "rmsnorm/dx"), kGradRtol, kGradAtol, "rmsnorm dx");
  expect_close(dw, read_h5(kFile, "rmsnorm/dw"), kGradRtol, kGradAtol, "rmsnorm dw");
}

// The fp32 tables add one rounding (u = 2^-24 relative) to cos and sin; still a few u.
TEST(KernelLlamaFixture, RopeMatchesTorchRotateHalf) {
  const Heads h = dims("rope");
  const float theta = (float)read_h5(kFile, "rope/theta").at(0);
  auto x = load_f32("rope/qkv"), g = load_f32("rope/dout");
  ASSERT_EQ(x.size(), (size_t)h.B * h.T * (h.NH + 2 * h.NKV) * h.D);
  std::vector<float> c((size_t)h.T * h.D / 2), s((size_t)h.T * h.D / 2);
  loom::cpu::rope_table(c.data(), s.data(), h.T, h.D, theta);
  loom::cpu::rope_forward(x.data(), c.data(), s.data(), h.B, h.T, h.NH, h.NKV, h.D);
  loom::cpu::rope_backward(g.data(), c.data(), s.data(), h.B, h.T, h.NH, h.NKV, h.D);
  expect_close(x, read_h5(kFile, "rope/out"), kFwdRtol, kFwdAtol, "rope out");
  expect_close(g, read_h5(kFile, "rope/dqkv"), kGradRtol, kGradAtol, "rope dqkv");
}

TEST(KernelLlamaFixture, SwigluMatchesTorch) {
  std::vector<size_t> sh;
  auto gu = load_f32("swiglu/gu", &sh), g = load_f32("swiglu/dout");
  ASSERT_EQ(sh.size(), 2u);
  const int N = (int)sh[0], F = (int)sh[1] / 2;
  std::vector<float> out((size_t)N * F), dgu((size_t)N * 2 * F);
  loom::cpu::swiglu_forward(out.data(), gu.data(), N, F);
  loom::cpu::swiglu_backward(dgu.data(), g.data(), gu.data(), N, F);
  expect_close(out, read_h5(kFile, "swiglu/out"), kFwdRtol, kFwdAtol, "swiglu out");
  expect_close(dgu, read_h5(kFile, "swiglu/dgu"), kGradRtol, kGradAtol, "swiglu dgu");
}

TEST(KernelLlamaFixture, GroupedAndMultiQueryAttentionMatchTorch) {
  for (const std::string grp : {"gqa", "mqa"}) {
    const Heads h = dims(grp);
    auto x = load_f32(grp + "/qkv"), g = load_f32(grp + "/dout");
    const size_t BT = (size_t)h.B * h.T, TT = (size_t)h.B * h.NH * h.T * h.T;
    ASSERT_EQ(x.size(), BT * (h.NH + 2 * h.NKV) * h.D) << grp;
    std::vector<float> out(BT * h.NH * h.D), att(TT), dx(x.size());
    std::vector<float> scratch(
        loom::cpu::attention_backward_scratch_floats(h.B, h.T, h.NH, h.NKV, h.D));
    loom::cpu::attention_forward_gqa(out.data(), att.data(), x.data(), h.B, h.T, h.NH, h.NKV, h.D);
    loom::cpu::attention_backward_gqa(dx.data(), scratch.data(), g.data(), x.data(), att.data(),
                                      h.B, h.T, h.NH, h.NKV, h.D);
    expect_close(out, read_h5(kFile, grp + "/out"), kFwdRtol, kFwdAtol, grp + " out");
    expect_close(dx, read_h5(kFile, grp + "/dqkv"), kGradRtol, kGradAtol, grp + " dqkv");
  }
}
