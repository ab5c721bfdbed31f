// The sorted-key embedding backward vs the cpu twin at sizes around its sort tiles, in fp32,
// bf16 and fp16: the same bits (same additions in the same order) and the same bits run to run.
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/embedding.h"
#include "tests/cuda/cuda_scratch.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace {

class CudaEmbeddingSort : public CudaTest {};

struct Case {
  int B, T, C, vocab;  // tokens drawn from [0, vocab); the shard holds [kVstart, kVstart + Vl)
  bool one_token;      // every row the same token: one run of N rows
};
constexpr int kVstart = 3;

// N = B*T: 1; 3 (padding to 4); 2047, 2049 (around one 2048-key shared-memory tile: the second
// needs global bitonic steps); 5000 (8192 padded keys, three tiles' worth of global steps).
// C: 1, 42 (not a multiple of the 128-thread block), 64, 130 (a second column pass per thread).
const Case kCases[] = {{1, 1, 1, 8, false},       {1, 3, 42, 8, false},
                       {1, 2047, 64, 50, false},  {3, 683, 130, 9000, false},
                       {2, 2500, 42, 700, false}, {4, 300, 64, 5, true}};

std::vector<int32_t> make_tokens(const Case& k, uint32_t seed) {
  const int N = k.B * k.T;
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(0, k.vocab - 1);
  std::vector<int32_t> t(N);
  for (auto& x : t) x = k.one_token ? kVstart : d(gen);
  return t;
}

// Both twins add, per wte element, its initial value and then dout[n] of the rows n holding the
// token in increasing n, one fp32 addition at a time; low-precision dout is widened exactly. So
// the results are equal bit for bit (no bound needed), and so are two runs.
template <typename T>
void check(const Case& k, const char* dtype) {
  const int B = k.B, T_ = k.T, C = k.C, N = B * T_;
  const int Vl = k.vocab - kVstart - 1;  // the shard leaves out the first kVstart ids and the last
  const std::string what = std::string(dtype) + " B=" + std::to_string(B) +
                           " T=" + std::to_string(T_) + " C=" + std::to_string(C) +
                           " vocab=" + std::to_string(k.vocab);
  const auto tokens = make_tokens(k, 1);
  const auto dout = round_to<T>(randu((size_t)N * C, 2));
  const auto dwte0 = randu((size_t)std::max(Vl, 1) * C, 3), dwpe0 = randu((size_t)T_ * C, 4);
  std::vector<float> dwte = dwte0, dwpe = dwpe0;
  cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T_, C, kVstart,
                          Vl);
  DevBuf<int32_t> dTok(tokens);
  DevBuf<T> dDout(convert<T>(dout));
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; run++) {
    DevBuf<float> dDwte(dwte0), dDwpe(dwpe0);
    cuda::embedding_backward(dDwte.get(), dDwpe.get(), dDout.get(), dTok.get(), B, T_, C, kVstart,
                             Vl, nullptr, test_scratch());
    runs.push_back(dDwte.download());
    EXPECT_TRUE(bitwise_equal(dDwpe.download(), dwpe)) << "dwpe " << what;
  }
  EXPECT_TRUE(bitwise_equal(runs[0], dwte))
      << "dwte " << what << ", norm-wise error " << rel_err(runs[0], dwte);
  EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "dwte run to run " << what;
}

TEST_F(CudaEmbeddingSort, MatchesCpuBitwise) {
  for (const Case& k : kCases) {
    check<float>(k, "fp32");
    check<bf16>(k, "bf16");
    check<f16>(k, "fp16");
  }
}

// Too little scratch for N rows: one clear error before any work, naming the sizes.
TEST_F(CudaEmbeddingSort, TooLittleScratchIsRefused) {
  const int T = 1000, C = 8;
  DevBuf<float> dDwte((size_t)4 * C), dDout((size_t)T * C);
  DevBuf<int32_t> dTok(std::vector<int32_t>(T, 0));
  const size_t need = cuda::embedding_backward_scratch_bytes(T);
  EXPECT_EQ(need, 1024u * 8u) << "1000 rows pad to 1024 keys of 8 bytes";
  cuda::Workspace small = test_scratch();
  small.bytes = need - 1;
  try {
    cuda::embedding_backward(dDwte.get(), nullptr, dDout.get(), dTok.get(), 1, T, C, 0, 4, nullptr,
                             small);
    ADD_FAILURE() << "no error";
  } catch (const cuda::CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("8192 bytes of scratch"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom::cudatest
