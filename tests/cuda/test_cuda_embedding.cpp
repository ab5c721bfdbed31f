// cuda twin of the vocab-parallel token + position embedding vs the cpu twin (forward, backward).
#include <string>
#include <vector>

#include "kernels/embedding.h"
#include "tests/cuda/cuda_scratch.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace embedding {

class CudaEmbedding : public CudaTest {};

// Tokens over a vocab of 20 with many repeats; the shard holds ids [5, 17), so some tokens are
// outside it (their rows stay zero in the forward and contribute nothing to dwte).
std::vector<int32_t> make_tokens(int N, uint32_t seed) {
  std::vector<int32_t> t = test::randi(N, 20, seed);
  t[N - 1] = t[0];  // first and last rows share a token
  return t;
}

constexpr int kVstart = 5, kVl = 12;

struct Shape {
  int B, T, C;
};
// C = 64: 128-bit packs; C = 42: scalar path. B*T = 300 rows: not a power of two (the sort pads).
const Shape kShapes[] = {{3, 100, 64}, {2, 7, 42}};

TEST_F(CudaEmbedding, Fp32MatchesCpuBitwise) {
  for (const Shape& s : kShapes) {
    const int B = s.B, T = s.T, C = s.C, N = B * T;
    const std::string what =
        "B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C);
    auto tokens = make_tokens(N, 1);
    auto wte = randu((size_t)kVl * C, 2), wpe = randu((size_t)T * C, 3);
    auto dout = randu((size_t)N * C, 4), dwte0 = randu((size_t)kVl * C, 5);
    auto dwpe0 = randu((size_t)T * C, 6);
    DevBuf<int32_t> dTok(tokens);
    DevBuf<float> dWte(wte), dWpe(wpe), dOut((size_t)N * C), dDout(dout);
    for (bool with_wpe : {true, false}) {
      std::vector<float> out((size_t)N * C);
      cpu::embedding_forward(out.data(), tokens.data(), wte.data(), with_wpe ? wpe.data() : nullptr,
                             B, T, C, kVstart, kVl);
      cuda::embedding_forward(dOut.get(), dTok.get(), dWte.get(), with_wpe ? dWpe.get() : nullptr,
                              B, T, C, kVstart, kVl, nullptr);
      EXPECT_TRUE(bitwise_equal(dOut.download(), out)) << "forward " << what << " wpe=" << with_wpe;
    }
    // Same summation order as the cpu twin (rows in increasing order per element): same bits.
    std::vector<float> dwte = dwte0, dwpe = dwpe0;
    cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, kVstart,
                            kVl);
    DevBuf<float> dDwte(dwte0), dDwpe(dwpe0);
    cuda::embedding_backward(dDwte.get(), dDwpe.get(), dDout.get(), dTok.get(), B, T, C, kVstart,
                             kVl, nullptr, test_scratch());
    EXPECT_TRUE(bitwise_equal(dDwte.download(), dwte)) << "dwte " << what;
    EXPECT_TRUE(bitwise_equal(dDwpe.download(), dwpe)) << "dwpe " << what;
    EXPECT_REL_LE(dDwte.download(), dwte, kTolF32, "dwte " + what);
    // Without dwpe only dwte changes.
    DevBuf<float> dDwte2(dwte0);
    cuda::embedding_backward(dDwte2.get(), nullptr, dDout.get(), dTok.get(), B, T, C, kVstart, kVl,
                             nullptr, test_scratch());
    EXPECT_TRUE(bitwise_equal(dDwte2.download(), dwte)) << "dwte without dwpe " << what;
  }
}

template <typename T>
class CudaEmbeddingLowp : public CudaTest {};
TYPED_TEST_SUITE(CudaEmbeddingLowp, LowpTypes, TypeNames);

// bf16 and fp16: the forward rounds the cpu twin's fp32 sum once (bitwise equal to the host
// rounding; without wpe, the rows of wte and zeros outside the shard exactly); dwte, dwpe are
// fp32 sums of the exact low-precision gradient values in the cpu twin's order (bitwise).
TYPED_TEST(CudaEmbeddingLowp, MatchesCpuOnRoundedInputs) {
  const std::string ty = type_name<TypeParam>();
  const uint32_t seed = per_type<TypeParam>(7u, 11u);
  for (const Shape& s : kShapes) {
    const int B = s.B, T = s.T, C = s.C, N = B * T;
    auto tokens = make_tokens(N, seed);
    auto wte = round_to<TypeParam>(randu((size_t)kVl * C, seed + 1));
    auto wpe = round_to<TypeParam>(randu((size_t)T * C, seed + 2));
    auto dout = round_to<TypeParam>(randu((size_t)N * C, seed + 3));
    std::vector<float> out((size_t)N * C), dwte((size_t)kVl * C, 0.0f), dwpe((size_t)T * C, 0.0f);
    cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, kVstart,
                           kVl);
    cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, kVstart,
                            kVl);
    DevBuf<int32_t> dTok(tokens);
    DevBuf<TypeParam> hWte(convert<TypeParam>(wte)), hWpe(convert<TypeParam>(wpe)),
        hOut((size_t)N * C), hDout(convert<TypeParam>(dout));
    DevBuf<float> dDwte(std::vector<float>((size_t)kVl * C, 0.0f)),
        dDwpe(std::vector<float>((size_t)T * C, 0.0f));
    cuda::embedding_forward(hOut.get(), dTok.get(), hWte.get(), hWpe.get(), B, T, C, kVstart, kVl,
                            nullptr);
    cuda::embedding_backward(dDwte.get(), dDwpe.get(), hDout.get(), dTok.get(), B, T, C, kVstart,
                             kVl, nullptr, test_scratch());
    EXPECT_TRUE(bitwise_equal(to_f32(hOut.download()), round_to<TypeParam>(out)))
        << ty << " forward";
    EXPECT_TRUE(bitwise_equal(dDwte.download(), dwte)) << ty << " dwte (fp32 accumulation)";
    EXPECT_TRUE(bitwise_equal(dDwpe.download(), dwpe)) << ty << " dwpe (fp32 accumulation)";
    cpu::embedding_forward(out.data(), tokens.data(), wte.data(), nullptr, B, T, C, kVstart, kVl);
    cuda::embedding_forward(hOut.get(), dTok.get(), hWte.get(), nullptr, B, T, C, kVstart, kVl,
                            nullptr);
    EXPECT_TRUE(bitwise_equal(to_f32(hOut.download()), out)) << ty << " forward without wpe";
  }
}

}  // namespace embedding
}  // namespace loom::cudatest
