// The cuda Backend (fp32, bf16 and fp16 compute) against a cpu backend, method by method.
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "tests/cuda/cuda_backend_test.h"

namespace loom::cudatest {
namespace {

TEST_P(CudaBackendTest, DescribesItselfAndOwnsAStream) {
  EXPECT_EQ(be().device(), Device::CUDA);
  EXPECT_EQ(be().act_dtype(), GetParam());
  EXPECT_NE(be().stream(), nullptr);
  const std::string d = be().describe();
  EXPECT_EQ(d.rfind("cuda device 0: ", 0), 0u) << d;
  const char* want = half() ? "fp16 compute" : lowp_ ? "bf16 compute" : "fp32 compute";
  EXPECT_NE(d.find(want), std::string::npos) << d;
}

TEST_P(CudaBackendTest, MemoryOpsAndCasts) {
  const size_t n = 1001;
  const auto x = randu(n, 1, -100.0f, 100.0f);
  Buffer a = dev(x), b(n * sizeof(float), Device::CUDA);
  be().copy(b.data(), a.data(), n * sizeof(float));
  EXPECT_TRUE(bitwise_equal(get_f32(b, n), x)) << "from_host, copy, to_host";
  be().zero(b.data(), n * sizeof(float));
  EXPECT_TRUE(bitwise_equal(get_f32(b, n), std::vector<float>(n, 0.0f))) << "zero";
  Buffer c(n * be().act_size(), Device::CUDA);
  be().cast_to_act(c.data(), F(a), n);  // round to nearest even, as the host's bf16_from_float
  EXPECT_TRUE(bitwise_equal(get_act(c, n), act_vals(x))) << "cast_to_act + act_to_host_f32";
}

TEST_P(CudaBackendTest, Embedding) {
  const int B = 2, T = 17, C = 64, V = 300, vstart = 100, Vl = 128, N = B * T;
  const auto tokens = rand_ids(N, V, 2);  // some in the shard [100, 228), some not
  const auto wte = act_vals(randu(size_t(Vl) * C, 3)), wpe = act_vals(randu(size_t(T) * C, 4));
  std::vector<float> out(size_t(N) * C), out_nopos(out.size());
  ref().embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, vstart, Vl);
  ref().embedding_forward(out_nopos.data(), tokens.data(), wte.data(), nullptr, B, T, C, vstart,
                          Vl);
  Buffer dtok = dev(tokens), dwte = act(wte), dwpe = act(wpe), dout = act_nan(out.size());
  be().embedding_forward(dout.data(), I(dtok), dwte.data(), dwpe.data(), B, T, C, vstart, Vl);
  EXPECT_REL_LE(get_act(dout, out.size()), out, tol(kTolF32), "embedding_forward");
  be().embedding_forward(dout.data(), I(dtok), dwte.data(), nullptr, B, T, C, vstart, Vl);
  EXPECT_REL_LE(get_act(dout, out.size()), out_nopos, tol(kTolF32), "embedding_forward, no wpe");

  const auto g = act_vals(randu(out.size(), 5));
  auto gwte = randu(wte.size(), 6), gwpe = randu(wpe.size(), 7);  // accumulated into
  Buffer dg = act(g), dgwte = dev(gwte), dgwpe = dev(gwpe);
  ref().embedding_backward(gwte.data(), gwpe.data(), g.data(), tokens.data(), B, T, C, vstart, Vl);
  be().embedding_backward(F(dgwte), F(dgwpe), dg.data(), I(dtok), B, T, C, vstart, Vl);
  EXPECT_REL_LE(get_f32(dgwte, gwte.size()), gwte, tol(kTolF32), "embedding_backward dwte");
  EXPECT_REL_LE(get_f32(dgwpe, gwpe.size()), gwpe, tol(kTolF32), "embedding_backward dwpe");
}

TEST_P(CudaBackendTest, LayerNorm) {
  const int N = 34, C = 96;
  const auto x = act_vals(randu(size_t(N) * C, 8, -2.0f, 3.0f));
  const auto w = act_vals(randu(C, 9, 0.5f, 1.5f)), b = act_vals(randu(C, 10));
  std::vector<float> out(x.size()), mean(N), rstd(N);
  ref().layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  Buffer dx = act(x), dw = act(w), db = act(b), dout = act_nan(out.size()), dmean = f32_nan(N),
         drstd = f32_nan(N);
  be().layernorm_forward(dout.data(), F(dmean), F(drstd), dx.data(), dw.data(), db.data(), N, C);
  EXPECT_REL_LE(get_act(dout, out.size()), out, tol(kTolF32), "layernorm_forward out");
  EXPECT_REL_LE(get_f32(dmean, N), mean, tol(kTolF32), "layernorm_forward mean");
  EXPECT_REL_LE(get_f32(drstd, N), rstd, tol(kTolF32), "layernorm_forward rstd");

  const auto g = act_vals(randu(x.size(), 11));
  auto gin = act_vals(randu(x.size(), 12));  // dinp, dw, db accumulate
  auto gw = randu(C, 13), gb = randu(C, 14);
  Buffer dg = act(g), dgin = act(gin), dgw = dev(gw), dgb = dev(gb);
  ref().layernorm_backward(gin.data(), gw.data(), gb.data(), g.data(), x.data(), w.data(),
                           mean.data(), rstd.data(), N, C);
  be().layernorm_backward(dgin.data(), F(dgw), F(dgb), dg.data(), dx.data(), dw.data(), F(dmean),
                          F(drstd), N, C);
  EXPECT_REL_LE(get_act(dgin, gin.size()), gin, tol(kTolF32), "layernorm_backward dinp");
  EXPECT_REL_LE(get_f32(dgw, C), gw, tol(kTolF32), "layernorm_backward dw");
  EXPECT_REL_LE(get_f32(dgb, C), gb, tol(kTolF32), "layernorm_backward db");
}

TEST_P(CudaBackendTest, Matmul) {
  const int N = 34, IC = 64, OC = 96;
  const auto x = act_vals(randu(size_t(N) * IC, 15)), w = act_vals(randu(size_t(IC) * OC, 16));
  const auto bias = act_vals(randu(OC, 17));
  std::vector<float> out(size_t(N) * OC);
  ref().matmul_forward(out.data(), x.data(), w.data(), bias.data(), N, IC, OC);
  Buffer dx = act(x), dw = act(w), dbias = act(bias), dout = act_nan(out.size());
  be().matmul_forward(dout.data(), dx.data(), dw.data(), dbias.data(), N, IC, OC);
  EXPECT_REL_LE(get_act(dout, out.size()), out, tol(kTolF32), "matmul_forward");

  const auto g = act_vals(randu(out.size(), 18));
  std::vector<float> gin(x.size());                      // overwritten
  auto gw = randu(w.size(), 19), gbias = randu(OC, 20);  // accumulated into
  Buffer dg = act(g), dgin = act_nan(x.size()), dgw = dev(gw), dgb = dev(gbias);
  ref().matmul_backward(gin.data(), gw.data(), gbias.data(), g.data(), x.data(), w.data(), N, IC,
                        OC);
  be().matmul_backward(dgin.data(), F(dgw), F(dgb), dg.data(), dx.data(), dw.data(), N, IC, OC);
  EXPECT_REL_LE(get_act(dgin, gin.size()), gin, tol(kTolF32), "matmul_backward dinp");
  EXPECT_REL_LE(get_f32(dgw, gw.size()), gw, tol(kTolF32), "matmul_backward dw");
  EXPECT_REL_LE(get_f32(dgb, OC), gbias, tol(kTolF32), "matmul_backward dbias");
}

TEST_P(CudaBackendTest, Attention) {
  // Head size 16, T not a multiple of the tiles, two query heads per kv head.
  const int B = 2, T = 33, NH = 4, NKV = 2, D = 16, C = NH * D, W = (NH + 2 * NKV) * D;
  EXPECT_FALSE(be().traits().attention_saves_probabilities());
  EXPECT_EQ(be().traits().attention_saved_floats(B, NH, T), size_t(B) * NH * T);
  const auto qkv = act_vals(randu(size_t(B) * T * W, 22));
  std::vector<float> out(size_t(B) * T * C), att(ref().traits().attention_saved_floats(B, NH, T));
  ref().attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, NKV, D);
  Buffer dqkv = act(qkv), dout = act_nan(out.size());
  Buffer saved(be().traits().attention_saved_floats(B, NH, T) * sizeof(float), Device::CUDA);
  Buffer scratch(be().traits().attention_scratch_floats(B, NH, NKV, T, D) * sizeof(float),
                 Device::CUDA);
  be().attention_forward(dout.data(), F(saved), dqkv.data(), B, T, NH, NKV, D);
  const auto got_out = get_act(dout, out.size());
  EXPECT_REL_LE(got_out, out, tol(kTolF32Attn), "attention_forward");

  const auto g = act_vals(randu(out.size(), 23));
  std::vector<float> gqkv(qkv.size()),
      cpu_scratch(ref().traits().attention_scratch_floats(B, NH, NKV, T, D));
  // The cpu reference differentiates its own forward; the cuda backward gets the cuda output.
  ref().attention_backward(gqkv.data(), cpu_scratch.data(), g.data(), qkv.data(), out.data(),
                           att.data(), B, T, NH, NKV, D);
  Buffer dg = act(g), dgqkv = act_nan(qkv.size());
  be().attention_backward(dgqkv.data(), F(scratch), dg.data(), dqkv.data(), dout.data(), F(saved),
                          B, T, NH, NKV, D);
  EXPECT_REL_LE(get_act(dgqkv, gqkv.size()), gqkv, tol(kTolF32Attn), "attention_backward");
}

TEST_P(CudaBackendTest, GeluBiasResidualAddInplace) {
  const size_t n = 1001;  // not a multiple of a 128-bit pack: the scalar paths
  const auto x = act_vals(randu(n, 24, -5.0f, 5.0f)), g = act_vals(randu(n, 25));
  std::vector<float> y(n), gx(n);
  ref().gelu_forward(y.data(), x.data(), n);
  ref().gelu_backward(gx.data(), x.data(), g.data(), n);
  Buffer dx = act(x), dy = act_nan(n), dg = act(g);
  be().gelu_forward(dy.data(), dx.data(), n);
  EXPECT_REL_LE(get_act(dy, n), y, tol(kTolF32), "gelu_forward");
  be().gelu_backward(dg.data(), dx.data(), dg.data(), n);  // dinp aliasing dout
  EXPECT_REL_LE(get_act(dg, n), gx, tol(kTolF32), "gelu_backward");

  const int N = 34, C = 96;
  const auto r = act_vals(randu(size_t(N) * C, 26, -8.0f, 8.0f));
  const auto p = act_vals(randu(r.size(), 27)), bias = act_vals(randu(C, 28));
  std::vector<float> o(r.size());
  ref().bias_residual(o.data(), r.data(), p.data(), bias.data(), N, C);
  Buffer dr = act(r), dp = act(p), db = act(bias), dout = act_nan(o.size());
  be().bias_residual(dout.data(), dr.data(), dp.data(), db.data(), N, C);
  EXPECT_TRUE(bitwise_equal(get_act(dout, o.size()), act_vals(o))) << "bias_residual";

  auto acc = randu(n, 29);
  const auto add = randu(n, 30);
  Buffer dacc = dev(acc), dadd = dev(add);
  ref().add_inplace(acc.data(), add.data(), n);
  be().add_inplace(F(dacc), F(dadd), n);
  EXPECT_TRUE(bitwise_equal(get_f32(dacc, n), acc)) << "add_inplace";
}

// One vocab shard: [0, 128) of V = 120 (padding at the end, every target in the shard), and
// [64, 192) of V = 150 (targets in and out of the shard).
TEST_P(CudaBackendTest, ClassifierAndCrossEntropy) {
  const int N = 34, C = 64, Vl = 128;
  const int shards[2][2] = {{0, 120}, {64, 150}};
  for (const auto& sh : shards) {
    const int vstart = sh[0], V = sh[1];
    const std::string what = " vstart=" + std::to_string(vstart) + " V=" + std::to_string(V);
    const auto x = act_vals(randu(size_t(N) * C, 31)),
               W = act_vals(randu(size_t(Vl) * C, 32, -0.3f, 0.3f));
    const auto targets = rand_ids(N, V, 33);
    std::vector<float> logits(size_t(N) * Vl), maxv(N), sums(2 * N), losses(N);
    std::vector<float> work(ref().traits().classifier_work_floats(N, Vl));
    ref().classifier_forward(logits.data(), maxv.data(), sums.data(), work.data(), x.data(),
                             W.data(), targets.data(), N, C, Vl, vstart, V);
    ref().ce_loss(losses.data(), maxv.data(), sums.data(), N);
    EXPECT_EQ(be().traits().classifier_work_floats(N, Vl), 0u);
    Buffer dx = act(x), dW = act(W), dt = dev(targets), dlogits = act_nan(logits.size());
    Buffer dmax = f32_nan(N), dsums = f32_nan(2 * N), dloss = f32_nan(N);
    be().classifier_forward(dlogits.data(), F(dmax), F(dsums), nullptr, dx.data(), dW.data(), I(dt),
                            N, C, Vl, vstart, V);
    be().ce_loss(F(dloss), F(dmax), F(dsums), N);
    EXPECT_REL_LE(get_act(dlogits, logits.size()), logits, tol(kTolF32), "logits" + what);
    EXPECT_REL_LE(get_f32(dmax, N), maxv, tol(kTolF32), "maxv" + what);
    EXPECT_REL_LE(get_f32(dsums, 2 * N), sums, tol(kTolF32), "sums" + what);
    EXPECT_REL_LE(get_f32(dloss, N), losses, tol(kTolF32), "ce_loss" + what);

    // ce_rescale_sums against a larger "global" max; row 0 as an empty shard (-inf).
    auto local = maxv, global = maxv, rs = sums;
    const auto bump = randu(N, 34, 0.0f, 2.0f);
    for (int n = 0; n < N; n++) global[n] += bump[n];
    local[0] = -INFINITY;
    Buffer dlocal = dev(local), dglobal = dev(global), drs = dev(rs);
    ref().ce_rescale_sums(rs.data(), local.data(), global.data(), N);
    be().ce_rescale_sums(F(drs), F(dlocal), F(dglobal), N);
    EXPECT_REL_LE(get_f32(drs, 2 * N), rs, tol(kTolF32), "ce_rescale_sums" + what);

    const float dl = 1.0f / N;
    std::vector<float> gx(x.size());               // overwritten
    auto gW = randu(W.size(), 35, -0.01f, 0.01f);  // accumulated into
    Buffer dgx = act_nan(x.size()), dgW = dev(gW);
    ref().classifier_backward(gx.data(), gW.data(), logits.data(), maxv.data(), sums.data(),
                              targets.data(), dl, x.data(), W.data(), N, C, Vl, vstart, V);
    be().classifier_backward(dgx.data(), F(dgW), dlogits.data(), F(dmax), F(dsums), I(dt), dl,
                             dx.data(), dW.data(), N, C, Vl, vstart, V);
    EXPECT_REL_LE(get_act(dlogits, logits.size()), logits, tol(kTolF32), "dlogits" + what);
    EXPECT_REL_LE(get_f32(dgW, gW.size()), gW, tol(kTolF32), "classifier dW" + what);
    EXPECT_REL_LE(get_act(dgx, gx.size()), gx, tol(kTolF32), "classifier dx" + what);
  }
}

TEST_P(CudaBackendTest, AdamWAndGradNorm) {
  // The factors live in backend memory (the device decides them); the cpu twin gets the same.
  auto coefs_of = [](const cpu::AdamWParams& hp, int apply) {
    cpu::AdamWCoefs c = cpu::adamw_coefs(hp);
    c.apply = apply;
    return c;
  };
  Buffer dc(sizeof(cpu::AdamWCoefs), Device::CUDA);
  auto put = [&](const cpu::AdamWCoefs& c) { be().from_host(dc.data(), &c, sizeof c); };
  auto C = [&] { return static_cast<const cpu::AdamWCoefs*>(dc.data()); };
  for (size_t n : {size_t(4096), size_t(1001)}) {  // float4 and scalar paths
    auto p = randu(n, 37), m = randu(n, 38, 0.0f, 0.01f), v = randu(n, 39, 0.0f, 0.01f);
    Buffer dp = dev(p), dm = dev(m), dv = dev(v), dg(n * sizeof(float), Device::CUDA);
    Buffer pact(n * be().act_size(), Device::CUDA);
    for (int step = 1; step <= 3; step++) {
      const auto g = randu(n, 40 + step);
      const cpu::AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f};
      const int apply = step == 2 ? 0 : 1;  // step 2 is skipped: nothing may change
      const cpu::AdamWCoefs c = coefs_of(hp, apply);
      ref().adamw_update(p.data(), g.data(), m.data(), v.data(), n, &c, nullptr);
      be().from_host(dg.data(), g.data(), n * sizeof(float));
      put(c);
      // fp32 compute: the compute weights are the parameters (nullptr, or param itself).
      void* act_out = lowp_ ? pact.data() : (step == 1 ? nullptr : dp.data());
      be().adamw_update(F(dp), F(dg), F(dm), F(dv), n, C(), act_out);
    }
    const auto gp = get_f32(dp, n);
    EXPECT_REL_LE(gp, p, 1e-6, "adamw params n=" + std::to_string(n));
    EXPECT_REL_LE(get_f32(dm, n), m, 1e-6, "adamw m");
    EXPECT_REL_LE(get_f32(dv, n), v, 1e-6, "adamw v");
    if (lowp_) {
      EXPECT_TRUE(bitwise_equal(get_act(pact, n), round_act(gp))) << "compute copy";
    }
  }
  if (!lowp_) {
    Buffer one(sizeof(float), Device::CUDA);
    put(coefs_of(cpu::AdamWParams{1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1, 1.0f}, 1));
    EXPECT_THROW(be().adamw_update(F(one), F(one), F(one), F(one), 1, C(), F(one) + 1),
                 InternalError)
        << "fp32 compute has no separate compute copy";
  }

  // Sums into a double of backend memory, accumulated in double: the two orders differ in the
  // last bits only (|error| <= n eps_fp64 sum|x|, far below 1e-10 relative here).
  const auto a = randu(1 << 16, 50), b = randu(1001, 51);
  Buffer da = dev(a), db = dev(b), dacc(2 * sizeof(double), Device::CUDA);
  double want[2] = {0, 0};
  for (int sq = 1; sq >= 0; --sq) {
    double* r = &want[sq];
    double* d = static_cast<double*>(dacc.data()) + sq;
    be().zero(d, sizeof(double));
    if (sq) {
      ref().sum_squares(r, a.data(), a.size()), ref().sum_squares(r, b.data(), b.size());
      be().sum_squares(d, F(da), a.size()), be().sum_squares(d, F(db), b.size());
    } else {
      ref().sum_values(r, a.data(), a.size()), ref().sum_values(r, b.data(), b.size());
      be().sum_values(d, F(da), a.size()), be().sum_values(d, F(db), b.size());
    }
  }
  double got[2];
  be().to_host(got, dacc.data(), sizeof got);
  EXPECT_NEAR(got[1], want[1], 1e-10 * want[1]) << "sum of squares";
  EXPECT_NEAR(got[0], want[0], 1e-10 * std::abs(want[0]) + 1e-9) << "sum of values";
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, CudaBackendTest, ::testing::Values(DType::F32, DType::BF16, DType::F16),
    [](const ::testing::TestParamInfo<DType>& i) {
      return std::string(i.param == DType::F32 ? "fp32" : i.param == DType::BF16 ? "bf16" : "fp16");
    });

}  // namespace
}  // namespace loom::cudatest
