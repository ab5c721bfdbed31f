// The GemmHandle's cuBLASLt plans: built once per GEMM key, reused by every later identical GEMM.
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "tests/cuda/cuda_test_util.h"
#ifdef LOOM_CUDA_EMULATE
#include "loom_emu/emulator.h"
#endif

namespace loom::cudatest {
namespace {

class CudaGemmPlans : public CudaTest {};

// The device buffers of one transformer-like layer step (N rows, C in, H = 4C hidden).
template <typename T>
struct LayerBufs {
  int N, C, H;
  DevBuf<T> x, w1, b1, pre, act, w2, b2, y, dy, dact, dx;
  DevBuf<float> dw1, db1, dw2, db2, mean, rstd, lnw_g, lnb_g;
  DevBuf<T> lnw;
  DevBuf<int32_t> tok;
  DevBuf<float> dwte;
  LayerBufs(int N_, int C_)
      : N(N_),
        C(C_),
        H(4 * C_),
        x(N * C),
        w1(C * H),
        b1(H),
        pre(N * H),
        act(N * H),
        w2(H * C),
        b2(C),
        y(N * C),
        dy(N * C),
        dact(N * H),
        dx(N * C),
        dw1(C * H),
        db1(H),
        dw2(H * C),
        db2(C),
        mean(N),
        rstd(N),
        lnw_g(C),
        lnb_g(C),
        lnw(C),
        tok(N),
        dwte(16 * C) {}
};

template <typename T>
void fill(LayerBufs<T>& b) {
  const int N = b.N, C = b.C, H = b.H;
  b.x.upload(convert<T>(randu((size_t)N * C, 1)));
  b.w1.upload(convert<T>(randu((size_t)C * H, 2, -0.1f, 0.1f)));
  b.b1.upload(convert<T>(randu(H, 3)));
  b.w2.upload(convert<T>(randu((size_t)H * C, 4, -0.1f, 0.1f)));
  b.b2.upload(convert<T>(randu(C, 5)));
  b.dy.upload(convert<T>(randu((size_t)N * C, 6)));
  b.lnw.upload(convert<T>(randu(C, 7, 0.5f, 1.5f)));
  b.mean.upload(randu(N, 8));
  b.rstd.upload(randu(N, 9, 0.5f, 2.0f));
  // The gradient accumulators start at zero, as the trainer's memset leaves them (the dW GEMMs
  // and the LayerNorm and embedding backward add into them).
  for (DevBuf<float>* g : {&b.dw1, &b.db1, &b.dw2, &b.db2, &b.lnw_g, &b.lnb_g, &b.dwte})
    g->upload(std::vector<float>(g->size(), 0.0f));
  std::vector<int32_t> tok(N);
  for (int n = 0; n < N; n++) tok[n] = (n * 7) % 16;
  b.tok.upload(tok);
}

// Every GEMM shape of a layer's forward and backward (bias and GELU epilogues, dinp, dw), the
// reductions and the embedding backward that share the handle's workspace as scratch.
template <typename T>
void layer_step(cuda::GemmHandle& h, LayerBufs<T>& b) {
  const int N = b.N, C = b.C, H = b.H;
  cuda::matmul_forward(h, b.act.get(), b.x.get(), b.w1.get(), b.b1.get(), N, C, H, b.pre.get(),
                       nullptr);
  cuda::matmul_forward(h, b.y.get(), b.act.get(), b.w2.get(), b.b2.get(), N, H, C, nullptr,
                       nullptr);
  cuda::matmul_backward(h, b.dact.get(), b.dw2.get(), b.db2.get(), b.dy.get(), b.act.get(),
                        b.w2.get(), N, H, C, nullptr);
  cuda::matmul_backward(h, b.dx.get(), b.dw1.get(), b.db1.get(), b.dact.get(), b.x.get(),
                        b.w1.get(), N, C, H, nullptr);
  cuda::layernorm_backward(b.dx.get(), b.lnw_g.get(), b.lnb_g.get(), b.dy.get(), b.x.get(),
                           b.lnw.get(), b.mean.get(), b.rstd.get(), N, C, nullptr, h.scratch());
  cuda::embedding_backward(b.dwte.get(), nullptr, b.dy.get(), b.tok.get(), 1, N, C, 0, 16, nullptr,
                           h.scratch());
  sync();
}

template <typename T>
void check_second_step_reuses(const char* dtype) {
  cuda::GemmHandle h;
  LayerBufs<T> b(150, 40);  // N, C, 4C: no dimension a multiple of a typical GEMM tile
  fill(b);
#ifdef LOOM_CUDA_EMULATE
  const loom_emu::Stats s0 = loom_emu::stats();
#endif
  layer_step(h, b);
  const size_t plans = h.plan_count();
  // fc (GELU aux + bias epilogue), proj (bias epilogue), 2 x (dinp, dw) backward GEMMs.
  EXPECT_EQ(plans, 6u) << dtype;
#ifdef LOOM_CUDA_EMULATE
  const loom_emu::Stats s1 = loom_emu::stats();
  EXPECT_EQ(s1.lt_heuristics - s0.lt_heuristics, plans) << dtype << ": one query per plan";
  EXPECT_EQ(s1.lt_descs - s0.lt_descs, plans) << dtype;
  EXPECT_EQ(s1.lt_layouts - s0.lt_layouts, 3 * plans) << dtype;
#endif
  for (int step = 0; step < 2; step++) layer_step(h, b);
  EXPECT_EQ(h.plan_count(), plans) << dtype << ": no new plan for the same shapes";
#ifdef LOOM_CUDA_EMULATE
  const loom_emu::Stats s2 = loom_emu::stats();
  EXPECT_EQ(s2.gemms - s1.gemms, 2 * (s1.gemms - s0.gemms)) << dtype << ": the GEMMs ran";
  EXPECT_EQ(s2.lt_heuristics, s1.lt_heuristics) << dtype << ": a heuristic query in a step";
  EXPECT_EQ(s2.lt_descs, s1.lt_descs) << dtype << ": a descriptor created in a step";
  EXPECT_EQ(s2.lt_layouts, s1.lt_layouts) << dtype << ": a layout created in a step";
  EXPECT_EQ(s2.allocations, s1.allocations) << dtype << ": a cudaMalloc in a step";
#endif
}

TEST_F(CudaGemmPlans, SecondStepBuildsAndAllocatesNothing) {
  check_second_step_reuses<float>("fp32");
  check_second_step_reuses<bf16>("bf16");
  check_second_step_reuses<f16>("fp16");
}

// A change of anything in the key (shape, transpose, alignment of an operand) gets its own plan,
// and a cached plan computes the right product for new pointers and alpha, beta.
TEST_F(CudaGemmPlans, KeyChangesGetTheirOwnPlan) {
  cuda::GemmHandle h;
  const int M = 9, N = 12, K = 7;
  auto a = randu((size_t)(M + 1) * K, 1), bm = randu((size_t)K * N, 2);
  DevBuf<float> dA(a), dB(bm), dC((size_t)M * N);
  std::vector<float> want((size_t)M * N);
  auto run = [&](size_t a_off, float alpha) {
    cuda::gemm(h, false, false, M, N, K, alpha, dA.get() + a_off, K, dB.get(), N, 0.0f, dC.get(), N,
               nullptr);
    cpu::gemm(false, false, M, N, K, alpha, a.data() + a_off, K, bm.data(), N, 0.0f, want.data(),
              N);
    EXPECT_REL_LE(dC.download(), want, kTolF32, "gemm a_off=" + std::to_string(a_off));
  };
  run(0, 1.0f);
  EXPECT_EQ(h.plan_count(), 1u);
  run(0, 0.5f);  // alpha is per call
  EXPECT_EQ(h.plan_count(), 1u);
  run(1, 1.0f);  // A only 4-byte aligned: a plan chosen for 256-byte operands must not run
  EXPECT_EQ(h.plan_count(), 2u);
  cuda::gemm(h, false, true, M, K, N, 1.0f, dC.get(), N, dB.get(), N, 0.0f, dA.get(), K, nullptr);
  EXPECT_EQ(h.plan_count(), 3u) << "a transposed B is another key";
  sync();
}

#ifdef LOOM_CUDA_EMULATE
// "No algorithm" is an answer kept in the plan too: the fallback path asks only once.
TEST_F(CudaGemmPlans, NoAlgorithmAnswersAreKept) {
  cuda::GemmHandle h;
  const int N = 20, IC = 32, OC = 48;
  DevBuf<float> dX(randu((size_t)N * IC, 1)), dW(randu((size_t)IC * OC, 2)), dB(randu(OC, 3)),
      dY((size_t)N * OC);
  loom_emu::set_cublaslt_epilogues(false);
  cuda::matmul_forward(h, dY.get(), dX.get(), dW.get(), dB.get(), N, IC, OC, nullptr, nullptr);
  const uint64_t q = loom_emu::stats().lt_heuristics;
  cuda::matmul_forward(h, dY.get(), dX.get(), dW.get(), dB.get(), N, IC, OC, nullptr, nullptr);
  loom_emu::set_cublaslt_epilogues(true);
  EXPECT_EQ(loom_emu::stats().lt_heuristics, q);
  EXPECT_EQ(h.plan_count(), 2u) << "the refused bias epilogue and the plain GEMM";
  sync();
}
#endif

}  // namespace
}  // namespace loom::cudatest
