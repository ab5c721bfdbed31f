// loom's single-rank Llama against the PyTorch float64 reference of tests/reference/:
// logits, loss, every parameter gradient, and the weights after 3 clipped AdamW steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "tests/model/llama_fixture.h"
#include "tests/support/mpi_test_env.h"
#include "tests/support/tolerance.h"

namespace loom {
namespace {

class LlamaReference : public ::testing::Test {
 protected:
  void SetUp() override {
    test::ensure_mpi();
    cfg_ = test::llama_fixture_config(test::source_path(test::kLlamaWeights));
    pc_ = make_parallel_ctx(Grid(1, 1, 1));
    trainer_ = std::make_unique<Trainer>(cfg_, *pc_, test::llama_fixture_samples(cfg_));
    trainer_->init_weights();
  }
  Config cfg_;
  std::unique_ptr<ParallelCtx> pc_;
  std::unique_ptr<Trainer> trainer_;
};

// fp32 against a float64 reference: the classes and error models of tolerance.h. The sums are
// no longer than GPT-2's (C = 32, F = 40, D = 8, V = 97 padded to 128). RoPE adds one source:
// an fp32 angle t * theta^(-2i/D) (t <= 7) is off by a few u of at most 7 rad, about 1e-6 rad,
// which rotates q and k by about 1e-6 of their size: within both classes.
constexpr double kLlamaForwardTol = test::kRefForward;
constexpr double kLlamaGradTol = test::kRefGrad;

TEST_F(LlamaReference, LogitsAndLossMatchPyTorch) {
  const std::string fx = test::source_path(test::kLlamaFixture);
  std::vector<float> got = test::llama_step1_logits(*trainer_, cfg_);
  std::vector<double> ref = test::read_h5(fx, "logits");  // (B, T, V)
  ASSERT_EQ(ref.size(), got.size());
  ASSERT_EQ(trainer_->layout().vocab_local() % 128, 0);
  const double err = test::rel_error(got.data(), ref);
  std::printf("logits: norm-wise rel err %.2e\n", err);
  EXPECT_LT(err, kLlamaForwardTol);
  const int N = trainer_->stage().tokens_per_micro_batch();
  const double loss = trainer_->stage().loss_sum() / N;
  const double ref_loss = test::read_h5(fx, "loss")[0];
  std::printf("loss: rel err %.2e\n", std::fabs(loss - ref_loss) / ref_loss);
  EXPECT_NEAR(loss, ref_loss, kLlamaForwardTol * std::fabs(ref_loss));
}

TEST_F(LlamaReference, EveryGradientMatchesPyTorch) {
  const std::string fx = test::source_path(test::kLlamaFixture);
  GPTStage& st = trainer_->stage();
  const int N = st.tokens_per_micro_batch();
  std::vector<int32_t> in(static_cast<size_t>(N)), tg(static_cast<size_t>(N));
  test::llama_fixture_samples(cfg_)(0, cfg_.parallel.micro_batch_size, in.data(), tg.data());
  st.zero_grads();
  st.forward(0, in.data(), tg.data(), 1.0f / float(N));
  st.backward(0, nullptr, nullptr);
  int checked = 0;
  double worst = 0;
  std::string worst_name;
  for (const ParamSpec& p : trainer_->layout().params()) {
    std::vector<double> ref = test::read_h5(fx, "grads/" + p.name);
    ASSERT_EQ(ref.size(), size_t(p.rows * p.cols)) << p.name;
    // Padding rows of the vocab (wte, lm_head beyond V) are not in the reference: zero.
    const float* g = st.grads() + p.offset;
    const double err = test::rel_error(g, ref);
    EXPECT_LT(err, kLlamaGradTol) << p.name;
    if (!(err <= worst)) worst = err, worst_name = p.name;
    for (size_t i = ref.size(); i < p.numel(); ++i) ASSERT_EQ(g[i], 0.0f) << p.name << " pad " << i;
    ++checked;
  }
  std::printf("gradients: worst norm-wise rel err %.2e (%s)\n", worst, worst_name.c_str());
  // wte, 6 per layer (ln_1, c_attn, attn.c_proj, ln_2, c_fc, mlp.c_proj), ln_f, lm_head.
  EXPECT_EQ(checked, 1 + 6 * cfg_.model.n_layer + 2);
}

TEST_F(LlamaReference, ThreeClippedAdamWStepsMatchPyTorch) {
  const std::string fx = test::source_path(test::kLlamaFixture);
  std::vector<double> ref_losses = test::read_h5(fx, "losses");
  std::vector<double> ref_norms = test::read_h5(fx, "grad_norm");
  for (int s = 1; s <= cfg_.train.steps; ++s) {
    StepStats st = trainer_->train_step(s);
    const double rl = ref_losses[size_t(s - 1)], rn = ref_norms[size_t(s - 1)];
    std::printf("step %d: loss rel err %.2e, grad norm rel err %.2e\n", s,
                std::fabs(st.loss - rl) / rl, std::fabs(st.grad_norm - rn) / rn);
    EXPECT_NEAR(st.loss, rl, kLlamaForwardTol * rl) << "step " << s;
    EXPECT_NEAR(st.grad_norm, rn, kLlamaGradTol * rn) << "step " << s;
  }
  // Every weight after 3 steps, max |w - w_ref| in units of the summed learning rates
  // (test::kRefWeightSteps, tolerance.h). No Llama tensor has a structurally zero gradient.
  const double steps_lr = cfg_.optimizer.lr * cfg_.train.steps;  // constant schedule
  double worst = 0;
  std::string worst_name;
  int checked = 0;
  for (const ParamSpec& p : trainer_->layout().params()) {
    std::vector<double> ref = test::read_h5(fx, "after3/" + p.name);
    const float* w = trainer_->stage().params() + p.offset;
    const double m = test::max_abs_diff(p.name, w, ref.data(), ref.size(), cfg_.model.d_model);
    EXPECT_LT(m / steps_lr, test::kRefWeightSteps) << p.name;
    if (!(m / steps_lr <= worst)) worst = m / steps_lr, worst_name = p.name;
    ++checked;
  }
  EXPECT_EQ(checked, 1 + 6 * cfg_.model.n_layer + 2);
  std::printf("after 3 steps: worst max |w - w_ref| %.2e of the summed learning rates (%s)\n",
              worst, worst_name.c_str());
}

}  // namespace
}  // namespace loom
