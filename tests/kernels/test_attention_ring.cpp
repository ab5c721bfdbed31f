// Ring (context-parallel) attention cpu twin: a sequence split into 2*cp chunks, each simulated
// rank holding a head chunk and a tail chunk, its queries run against every rank's keys and
// values block by block; outputs and the gradients of q, k and v equal the whole-sequence
// grouped-query attention.
#include <numeric>

#include "kernel_test_util.h"
#include "kernels/attention.h"
#include "kernels/attention_ring.h"

using namespace loom::ktest;

namespace {

struct Split {
  int B, T, NH, NKV, D, cp;
  int row() const { return (NH + 2 * NKV) * D; }
  int Tc() const { return T / (2 * cp); }
  // Global positions of rank r's rows: chunk r, then chunk 2cp-1-r (causal load balance).
  std::vector<int> positions(int r) const {
    std::vector<int> p;
    for (int c : {r, 2 * cp - 1 - r})
      for (int t = 0; t < Tc(); ++t) p.push_back(c * Tc() + t);
    return p;
  }
  // Rows `pos` of every sequence of x (B, T, width).
  std::vector<float> gather(const std::vector<float>& x, const std::vector<int>& pos,
                            int width) const {
    std::vector<float> y;
    for (int b = 0; b < B; ++b)
      for (int t : pos) {
        const float* src = x.data() + (size_t(b) * T + size_t(t)) * size_t(width);
        y.insert(y.end(), src, src + width);
      }
    return y;
  }
};

// Runs the ring over all ranks; `shift` moves the key positions (a mask bug) to show the
// comparison can fail.
void run_ring(const Split& s, const std::vector<float>& qkv, const std::vector<float>& dout,
              std::vector<float>& out, std::vector<float>& dqkv, int shift = 0) {
  const int C = s.NH * s.D, L = 2 * s.Tc(), W = s.row();
  std::vector<std::vector<int>> pos(size_t(s.cp));
  std::vector<std::vector<float>> x(size_t(s.cp)), dx(size_t(s.cp));
  for (int r = 0; r < s.cp; ++r) {
    pos[size_t(r)] = s.positions(r);
    x[size_t(r)] = s.gather(qkv, pos[size_t(r)], W);
    dx[size_t(r)].assign(x[size_t(r)].size(), 0.0f);
  }
  out.assign(size_t(s.B) * s.T * C, 0.0f);
  dqkv.assign(qkv.size(), 0.0f);
  const loom::cpu::RingDims d{s.B, L, L, s.NH, s.NKV, s.D, W, W};
  std::vector<float> work(loom::cpu::ring_attention_work_floats(d));
  for (int r = 0; r < s.cp; ++r) {
    const size_t rows = size_t(s.B) * s.NH * L;
    std::vector<float> acc(size_t(s.B) * L * C), m(rows), l(rows), o(acc.size()), lse(rows),
        delta(rows);
    const float* q = x[size_t(r)].data();
    loom::cpu::ring_attention_begin(acc.data(), m.data(), l.data(), d);
    for (int i = 0; i < s.cp; ++i) {  // the ring order: own block first, then r-1, r-2, ...
      const int src = (r - i + s.cp) % s.cp;
      std::vector<int> kpos = pos[size_t(src)];
      for (int& p : kpos) p += shift;
      const float* kv = x[size_t(src)].data();
      loom::cpu::ring_attention_forward_step(acc.data(), m.data(), l.data(), q, kv + C,
                                             kv + C + s.NKV * s.D, pos[size_t(r)].data(),
                                             kpos.data(), d, work.data());
    }
    loom::cpu::ring_attention_finish(o.data(), lse.data(), acc.data(), m.data(), l.data(), d);
    const std::vector<float> g = s.gather(dout, pos[size_t(r)], C);
    loom::cpu::ring_attention_delta(delta.data(), g.data(), o.data(), d);
    for (int i = 0; i < s.cp; ++i) {
      const int src = (r - i + s.cp) % s.cp;
      std::vector<int> kpos = pos[size_t(src)];
      for (int& p : kpos) p += shift;
      const float* kv = x[size_t(src)].data();
      float* dkv = dx[size_t(src)].data();
      loom::cpu::ring_attention_backward_step(dx[size_t(r)].data(), dkv + C, dkv + C + s.NKV * s.D,
                                              g.data(), q, kv + C, kv + C + s.NKV * s.D, lse.data(),
                                              delta.data(), pos[size_t(r)].data(), kpos.data(), d,
                                              work.data());
    }
    for (int b = 0; b < s.B; ++b)  // scatter this rank's output rows back to their positions
      for (int t = 0; t < L; ++t)
        std::copy_n(o.data() + (size_t(b) * L + size_t(t)) * C, C,
                    out.data() + (size_t(b) * s.T + size_t(pos[size_t(r)][size_t(t)])) * C);
  }
  for (int r = 0; r < s.cp; ++r)
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < L; ++t)
        std::copy_n(dx[size_t(r)].data() + (size_t(b) * L + size_t(t)) * W, W,
                    dqkv.data() + (size_t(b) * s.T + size_t(pos[size_t(r)][size_t(t)])) * W);
}

// Both sides are fp32 chains of the same sums (at most T = 32 terms) in other orders and with the
// online rescaling: each within n*u of the exact value, so within 2*32*6e-8 = 4e-6 of each other,
// under kernel_test_util.h's kGradRtol/kGradAtol.
void check(const Split& s) {
  const int C = s.NH * s.D;
  const auto qkv = randu(size_t(s.B) * s.T * s.row(), 71, -2.0f, 2.0f);
  const auto dout = randu(size_t(s.B) * s.T * C, 72);
  std::vector<float> ref(dout.size()), att(size_t(s.B) * s.NH * s.T * s.T), dref(qkv.size());
  std::vector<float> scratch(
      loom::cpu::attention_backward_scratch_floats(s.B, s.T, s.NH, s.NKV, s.D));
  loom::cpu::attention_forward_gqa(ref.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.D);
  loom::cpu::attention_backward_gqa(dref.data(), scratch.data(), dout.data(), qkv.data(),
                                    att.data(), s.B, s.T, s.NH, s.NKV, s.D);
  std::vector<float> out, dqkv;
  run_ring(s, qkv, dout, out, dqkv);
  const std::string what = "cp" + std::to_string(s.cp) + " NKV" + std::to_string(s.NKV);
  expect_close(out, to_double(ref), kGradRtol, kGradAtol, what + " out");
  expect_close(dqkv, to_double(dref), kGradRtol, kGradAtol, what + " dqkv");
}

TEST(RingAttention, EqualsWholeSequenceAttention) {
  check({2, 32, 4, 4, 8, 2});  // multi-head, 2 ranks of 2 chunks of 8
  check({2, 32, 4, 2, 8, 4});  // grouped, 4 ranks of 2 chunks of 4
  check({1, 24, 4, 1, 8, 3});  // multi-query, 3 ranks
}

TEST(RingAttention, AMaskOffByOneIsCaught) {
  const Split s{1, 16, 2, 2, 8, 2};
  const auto qkv = randu(size_t(s.B) * s.T * s.row(), 73, -2.0f, 2.0f);
  const auto dout = randu(size_t(s.B) * s.T * s.NH * s.D, 74);
  std::vector<float> ok, bad, dok, dbad;
  run_ring(s, qkv, dout, ok, dok);
  run_ring(s, qkv, dout, bad, dbad, -1);  // every query also sees its next key
  double worst = 0;
  for (size_t i = 0; i < ok.size(); ++i) worst = std::max(worst, double(std::fabs(ok[i] - bad[i])));
  EXPECT_GT(worst, 1e3 * kGradAtol);
}

}  // namespace
