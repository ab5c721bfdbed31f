// Ring attention cuda twin vs the cpu twin on the same (rounded) inputs: two key/value blocks
// with head/tail positions, forward (out, lse) and backward (dq, dk, dv accumulated over blocks).
#include <string>
#include <vector>

#include "kernels/attention_ring.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace {

template <typename T>
class CudaRingAttention : public CudaTest {};
TYPED_TEST_SUITE(CudaRingAttention, Fp32AndLowpTypes, TypeNames);

// Tolerances (cuda_test_util.h): the state, lse and gradients are fp32 on both sides (the same
// sums in another order: one key at a time against the cpu's BLAS tiles, kTolF32Attn); out is
// stored as T (type_tol). Inputs are rounded to T first, so both twins see the same values.
TYPED_TEST(CudaRingAttention, MatchesCpu) {
  using T = TypeParam;
  const std::string ty = type_name<T>();
  // 4 query heads over 2 kv heads of size 40 (two elements per lane, a partial second one), a
  // query block of two chunks of 5 rows (positions 5..9 and 25..29) against blocks at
  // positions 0..4 + 30..34 and 5..9 + 25..29.
  const int B = 2, NH = 4, NKV = 2, D = 40, Tc = 5, L = 2 * Tc, W = (NH + 2 * NKV) * D;
  const cpu::RingDims d{B, L, L, NH, NKV, D, W, W};
  const std::vector<int> qpos = {5, 6, 7, 8, 9, 25, 26, 27, 28, 29};
  const std::vector<int> kpos[2] = {{0, 1, 2, 3, 4, 30, 31, 32, 33, 34}, qpos};
  const int C = NH * D;
  const auto x = round_to<T>(randu(size_t(B) * L * W, 81, -2.0f, 2.0f));  // local q|k|v
  const auto y = round_to<T>(randu(size_t(B) * L * W, 82, -2.0f, 2.0f));  // a remote block
  const auto g = round_to<T>(randu(size_t(B) * L * C, 83));
  const std::vector<float>* blocks[2] = {&y, &x};
  const size_t rows = size_t(B) * NH * L;

  // cpu: forward over both blocks, out rounded to T as the cuda twin stores it.
  std::vector<float> acc(size_t(B) * L * C), m(rows), l(rows), out(acc.size()), lse(rows),
      delta(rows), work(cpu::ring_attention_work_floats(d));
  cpu::ring_attention_begin(acc.data(), m.data(), l.data(), d);
  for (int i = 0; i < 2; ++i)
    cpu::ring_attention_forward_step(acc.data(), m.data(), l.data(), x.data(),
                                     blocks[i]->data() + C, blocks[i]->data() + C + NKV * D,
                                     qpos.data(), kpos[i].data(), d, work.data());
  cpu::ring_attention_finish(out.data(), lse.data(), acc.data(), m.data(), l.data(), d);
  const auto out_t = round_to<T>(out);
  cpu::ring_attention_delta(delta.data(), g.data(), out_t.data(), d);
  std::vector<float> dq(x.size()), dkv[2] = {std::vector<float>(x.size()),
                                              std::vector<float>(x.size())};
  for (int i = 0; i < 2; ++i)
    cpu::ring_attention_backward_step(dq.data(), dkv[i].data() + C, dkv[i].data() + C + NKV * D,
                                      g.data(), x.data(), blocks[i]->data() + C,
                                      blocks[i]->data() + C + NKV * D, lse.data(), delta.data(),
                                      qpos.data(), kpos[i].data(), d, work.data());

  DevBuf<T> hx(convert<T>(x)), hy(convert<T>(y)), hg(convert<T>(g)), hout(out.size());
  const T* hblocks[2] = {hy.get(), hx.get()};
  DevBuf<int> hq(qpos), hk0(kpos[0]), hk1(kpos[1]);
  const int* hkpos[2] = {hk0.get(), hk1.get()};
  DevBuf<float> hacc(acc.size()), hm(rows), hl(rows), hlse(rows), hdelta(rows);
  cuda::ring_attention_begin(hacc.get(), hm.get(), hl.get(), d, nullptr);
  for (int i = 0; i < 2; ++i)
    cuda::ring_attention_forward_step(hacc.get(), hm.get(), hl.get(), hx.get(), hblocks[i] + C,
                                      hblocks[i] + C + NKV * D, hq.get(), hkpos[i], d, nullptr);
  cuda::ring_attention_finish(hout.get(), hlse.get(), hacc.get(), hm.get(), hl.get(), d, nullptr);
  EXPECT_REL_LE(to_f32(hout.download()), out, type_tol<T>(kTolF32Attn), ty + " ring out");
  EXPECT_REL_LE(hlse.download(), lse, kTolF32Attn, ty + " ring lse");
  cuda::ring_attention_delta(hdelta.get(), hg.get(), hout.get(), d, nullptr);
  DevBuf<float> hdq(std::vector<float>(x.size(), 0.0f));
  DevBuf<float> hdkv0(std::vector<float>(x.size(), 0.0f)),
      hdkv1(std::vector<float>(x.size(), 0.0f));
  DevBuf<float>* hdkv[2] = {&hdkv0, &hdkv1};
  for (int i = 0; i < 2; ++i)
    cuda::ring_attention_backward_step(hdq.get(), hdkv[i]->get() + C, hdkv[i]->get() + C + NKV * D,
                                       hg.get(), hx.get(), hblocks[i] + C, hblocks[i] + C + NKV * D,
                                       hlse.get(), hdelta.get(), hq.get(), hkpos[i], d, nullptr);
  // The gradients see out through delta: rounded out on both sides, so fp32 tolerances apply.
  EXPECT_REL_LE(hdq.download(), dq, kTolF32Attn, ty + " ring dq");
  for (int i = 0; i < 2; ++i)
    EXPECT_REL_LE(hdkv[i]->download(), dkv[i], kTolF32Attn,
                  ty + " ring dk|dv of block " + std::to_string(i));
}

}  // namespace
}  // namespace loom::cudatest
