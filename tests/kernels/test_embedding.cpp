// embedding cpu twin: vocab-shard forward vs reference, backward vs differences, determinism.
#include <omp.h>

#include <limits>

#include "kernel_test_util.h"
#include "kernels/embedding.h"

using namespace loom::ktest;

namespace {

// out (B*T, C) = (tok in shard ? wte[tok - vs] : 0) + (wpe ? wpe[t] : 0), in double.
void ref_embedding(std::vector<double>& out, const std::vector<int32_t>& tok,
                   const std::vector<double>& wte, const std::vector<double>* wpe, int B, int T,
                   int C, int vs, int vl) {
  out.assign((size_t)B * T * C, 0.0);
  for (int n = 0; n < B * T; n++)
    for (int c = 0; c < C; c++) {
      const int l = tok[n] - vs;
      double v = (l >= 0 && l < vl) ? wte[(size_t)l * C + c] : 0.0;
      if (wpe) v += (*wpe)[(size_t)(n % T) * C + c];
      out[(size_t)n * C + c] = v;
    }
}

// Full vocab 10, this rank holds ids [3, 7): tokens outside embed to 0 (plus the position).
constexpr int B = 2, T = 4, C = 6, V = 10, VS = 3, VL = 4;

}  // namespace

TEST(KernelEmbedding, ForwardVocabShardMatchesReference) {
  auto tok = loom::test::randi((size_t)B * T, V, 1);
  tok[0] = VS - 1, tok[1] = VS, tok[2] = VS + VL - 1, tok[3] = VS + VL;      // both shard edges
  auto wte = randu((size_t)VL * C, 2), wpe = randu((size_t)(T + 2) * C, 3);  // wpe may be longer
  auto wted = to_double(wte), wped = to_double(wpe);
  std::vector<double> want;
  for (int with_pos = 0; with_pos < 2; with_pos++) {
    std::vector<float> out((size_t)B * T * C, std::numeric_limits<float>::quiet_NaN());
    loom::cpu::embedding_forward(out.data(), tok.data(), wte.data(),
                                 with_pos ? wpe.data() : nullptr, B, T, C, VS, VL);
    ref_embedding(want, tok, wted, with_pos ? &wped : nullptr, B, T, C, VS, VL);
    // One fp32 addition per element: half an ulp.
    expect_close(out, want, 1e-7, 0.0, with_pos ? "out (wte+wpe)" : "out (wte only)");
  }
}

TEST(KernelEmbedding, BackwardMatchesFiniteDifferences) {
  auto tok = loom::test::randi((size_t)B * T, V, 10);
  tok[5] = tok[6] = VS + 1;  // a repeated in-shard token: its row sums two gradients
  auto wte = randu((size_t)VL * C, 11), wpe = randu((size_t)T * C, 12);
  auto R = randu((size_t)B * T * C, 13);
  std::vector<float> dwte((size_t)VL * C, 0.0f), dwpe((size_t)T * C, 0.0f);
  loom::cpu::embedding_backward(dwte.data(), dwpe.data(), R.data(), tok.data(), B, T, C, VS, VL);
  auto wted = to_double(wte), wped = to_double(wpe), Rd = to_double(R);
  std::vector<double> out;
  auto L = [&]() {
    ref_embedding(out, tok, wted, &wped, B, T, C, VS, VL);
    return dot(out, Rd);
  };
  expect_close(dwte, fd_grad(wted, L), kGradRtol, kGradAtol, "dwte");
  expect_close(dwpe, fd_grad(wped, L), kGradRtol, kGradAtol, "dwpe");
}

TEST(KernelEmbedding, BackwardAccumulatesAndSkipsNullWpe) {
  auto tok = loom::test::randi((size_t)B * T, V, 20);
  auto g = randu((size_t)B * T * C, 21);
  std::vector<float> dwte0((size_t)VL * C, 0.0f), dwpe0((size_t)T * C, 0.0f);
  loom::cpu::embedding_backward(dwte0.data(), dwpe0.data(), g.data(), tok.data(), B, T, C, VS, VL);
  auto dwte = randu((size_t)VL * C, 22), dwpe = randu((size_t)T * C, 23);
  std::vector<double> want_te(dwte.size()), want_pe(dwpe.size());
  for (size_t i = 0; i < dwte.size(); i++) want_te[i] = (double)dwte[i] + dwte0[i];
  for (size_t i = 0; i < dwpe.size(); i++) want_pe[i] = (double)dwpe[i] + dwpe0[i];
  loom::cpu::embedding_backward(dwte.data(), dwpe.data(), g.data(), tok.data(), B, T, C, VS, VL);
  expect_close(dwte, want_te, 1e-6, 1e-7, "dwte accumulates");
  expect_close(dwpe, want_pe, 1e-6, 1e-7, "dwpe accumulates");
  std::vector<float> dwte2((size_t)VL * C, 0.0f);
  loom::cpu::embedding_backward(dwte2.data(), nullptr, g.data(), tok.data(), B, T, C, VS, VL);
  EXPECT_TRUE(bitwise_equal(dwte2, dwte0));
}

TEST(KernelEmbedding, BackwardBitwiseSameFor1And2Threads) {
  const int b = 4, t = 64, c = 100, v = 40, vs = 8, vl = 20;  // many repeats per row
  auto tok = loom::test::randi((size_t)b * t, v, 30);
  auto g = randu((size_t)b * t * c, 31);
  const int saved = omp_get_max_threads();
  std::vector<float> te[2], pe[2];
  for (int k = 0; k < 2; k++) {
    omp_set_num_threads(k + 1);
    te[k] = randu((size_t)vl * c, 32);
    pe[k] = randu((size_t)t * c, 33);
    loom::cpu::embedding_backward(te[k].data(), pe[k].data(), g.data(), tok.data(), b, t, c, vs,
                                  vl);
  }
  omp_set_num_threads(saved);
  EXPECT_TRUE(bitwise_equal(te[0], te[1])) << "dwte differs between 1 and 2 threads";
  EXPECT_TRUE(bitwise_equal(pe[0], pe[1])) << "dwpe differs between 1 and 2 threads";
}
