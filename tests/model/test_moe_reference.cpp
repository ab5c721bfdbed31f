// loom's single-rank Mixture-of-Experts models against the PyTorch float64 reference of
// tests/reference/ (make_moe_fixtures.py): logits, losses, routing, gradients, 3 AdamW steps.
//
// It uses cfg.model.moe (num_experts, top_k, capacity_factor, aux_loss_coef, z_loss_coef) and
// Trainer::moe_stats() (train/moe_stats.h): the last step's aux_loss and z_loss (summed over
// layers), tokens_per_expert[layer][expert] (before dropping), dropped[layer], and, per layer over
// the step's B*T tokens in sample order, choices[layer][token*k + j] (the expert of the token's
// j-th choice, decreasing probability) and kept[layer][token*k + j] (1 kept, 0 dropped).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "tests/model/moe_fixture.h"
#include "tests/support/mpi_test_env.h"
#include "tests/support/tolerance.h"

namespace loom {
namespace {

class MoeReference : public ::testing::TestWithParam<test::MoeFixture> {
 protected:
  void SetUp() override {
    test::ensure_mpi();
    fx_ = test::source_path(GetParam().file());
    cfg_ = test::moe_fixture_config(GetParam());
    pc_ = make_parallel_ctx(Grid(1, 1, 1));
    trainer_ = std::make_unique<Trainer>(cfg_, *pc_, test::moe_fixture_samples(GetParam(), cfg_));
    trainer_->init_weights();
  }
  bool llama() const { return cfg_.model.llama(); }
  // Canonical tensors: wte (+ wpe), per layer 13 (gpt2: norms, attention and expert biases) or
  // 7 (llama), ln_f (+ bias) or ln_f + lm_head.
  int num_tensors() const {
    return llama() ? 1 + 7 * cfg_.model.n_layer + 2 : 2 + 13 * cfg_.model.n_layer + 2;
  }
  std::string fx_;
  Config cfg_;
  std::unique_ptr<ParallelCtx> pc_;
  std::unique_ptr<Trainer> trainer_;
};

// fp32 against a float64 reference: the classes and error models of tolerance.h. The sums are
// no longer than the dense fixtures' (C = 32, F = 16, E = 4, V = 97 padded to 128). The aux
// loss is coef * E * mean_s sum_e f P with f an exact count (the routing is equal) and P a mean
// of 8 fp32 softmax values, the z-loss a mean of 32 squared log-sum-exps of 4 fp32 logits:
// both carry the logits' relative error, so the forward class bounds them.
constexpr double kForwardTol = test::kRefForward;
constexpr double kGradTol = test::kRefGrad;

TEST_P(MoeReference, LogitsAndLossMatchPyTorch) {
  std::vector<float> got = test::moe_step1_logits(GetParam(), *trainer_, cfg_);
  std::vector<double> ref = test::read_h5(fx_, "logits");  // (B, T, V)
  ASSERT_EQ(ref.size(), got.size());
  const double err = test::rel_error(got.data(), ref);
  std::printf("logits: norm-wise rel err %.2e\n", err);
  EXPECT_LT(err, kForwardTol);
  const int N = trainer_->stage().tokens_per_micro_batch();
  const double loss = trainer_->stage().loss_sum() / N;  // cross-entropy alone
  const double ref_loss = test::read_h5(fx_, "loss")[0];
  EXPECT_NEAR(loss, ref_loss, kForwardTol * ref_loss);
}

// Every step: the top-k choices, the kept mask, the tokens per expert and the dropped counts
// equal the reference exactly (the fixture keeps competing router logits >= 1e-4 apart, 100x
// loom's fp32 error, at every step); the aux and z-losses in the forward class.
TEST_P(MoeReference, RoutingAndAuxLossesMatchPyTorch) {
  const int S = cfg_.train.steps, L = cfg_.model.n_layer, E = cfg_.model.moe.num_experts;
  const int K = cfg_.model.moe.top_k;
  const size_t BTK = size_t(cfg_.train.global_batch_size) * cfg_.model.seq_len * K;
  const std::vector<int> choices = test::read_h5_int(fx_, "choices");       // (S, L, B, T, K)
  const std::vector<int> kept = test::read_h5_int(fx_, "kept");             // (S, L, B, T, K)
  const std::vector<double> tpe = test::read_h5(fx_, "tokens_per_expert");  // (S, L, E)
  const std::vector<double> dropped = test::read_h5(fx_, "dropped");        // (S, L)
  const std::vector<double> aux = test::read_h5(fx_, "aux_loss");           // (S, L)
  const std::vector<double> z = test::read_h5(fx_, "z_loss");               // (S, L)
  ASSERT_EQ(choices.size(), size_t(S * L) * BTK);
  int64_t total_dropped = 0;
  for (int s = 1; s <= S; ++s) {
    trainer_->train_step(s);
    const auto& ms = trainer_->moe_stats();
    ASSERT_EQ(ms.tokens_per_expert.size(), size_t(L));
    ASSERT_EQ(ms.dropped.size(), size_t(L));
    double ref_aux = 0, ref_z = 0;
    for (int l = 0; l < L; ++l) {
      const size_t sl = size_t((s - 1) * L + l);
      ref_aux += aux[sl];
      ref_z += z[sl];
      ASSERT_EQ(ms.tokens_per_expert[size_t(l)].size(), size_t(E));
      for (int e = 0; e < E; ++e)
        EXPECT_EQ(ms.tokens_per_expert[size_t(l)][size_t(e)], int64_t(tpe[sl * E + e]))
            << "step " << s << " layer " << l << " expert " << e;
      EXPECT_EQ(ms.dropped[size_t(l)], int64_t(dropped[sl])) << "step " << s << " layer " << l;
      total_dropped += int64_t(dropped[sl]);
      ASSERT_EQ(ms.choices[size_t(l)].size(), BTK);
      ASSERT_EQ(ms.kept[size_t(l)].size(), BTK);
      int wrong_choice = 0, wrong_kept = 0;
      for (size_t i = 0; i < BTK; ++i) {
        wrong_choice += int(ms.choices[size_t(l)][i]) != choices[sl * BTK + i];
        wrong_kept += int(ms.kept[size_t(l)][i] != 0) != kept[sl * BTK + i];
      }
      EXPECT_EQ(wrong_choice, 0) << "step " << s << " layer " << l << ": top-k choices differ";
      EXPECT_EQ(wrong_kept, 0) << "step " << s << " layer " << l << ": kept masks differ";
    }
    std::printf("step %d: aux rel err %.2e, z rel err %.2e\n", s,
                std::fabs(ms.aux_loss - ref_aux) / ref_aux, std::fabs(ms.z_loss - ref_z) / ref_z);
    EXPECT_NEAR(ms.aux_loss, ref_aux, kForwardTol * ref_aux) << "step " << s;
    EXPECT_NEAR(ms.z_loss, ref_z, kForwardTol * ref_z) << "step " << s;
  }
  // The capacity fixtures drop assignments at every step; the dropless ones never do.
  if (cfg_.model.moe.capacity_factor > 0)
    EXPECT_GT(total_dropped, 0);
  else
    EXPECT_EQ(total_dropped, 0);
}

// The gradient of the objective (mean CE + every layer's aux and z-loss) with one micro-batch
// holding the whole global batch. Expert tensors are also compared one expert's block at a
// time, so a mistake confined to one expert is not averaged away by the others.
TEST_P(MoeReference, EveryGradientMatchesPyTorch) {
  GPTStage& st = trainer_->stage();
  const int N = st.tokens_per_micro_batch(), E = cfg_.model.moe.num_experts;
  std::vector<int32_t> in(static_cast<size_t>(N)), tg(static_cast<size_t>(N));
  test::moe_fixture_samples(GetParam(), cfg_)(0, cfg_.parallel.micro_batch_size, in.data(),
                                              tg.data());
  st.zero_grads();
  st.forward(0, in.data(), tg.data(), 1.0f / float(N));
  st.backward(0, nullptr, nullptr);
  int checked = 0;
  double worst = 0;
  std::string worst_name;
  for (const ParamSpec& p : trainer_->layout().params()) {
    std::vector<double> ref = test::read_h5(fx_, "grads/" + p.name);
    ASSERT_EQ(ref.size(), size_t(p.rows * p.cols)) << p.name;
    const float* g = st.grads() + p.offset;
    const double err = test::rel_error(g, ref);
    EXPECT_LT(err, kGradTol) << p.name;
    if (!(err <= worst)) worst = err, worst_name = p.name;
    if (p.name.find(".mlp.experts.") != std::string::npos) {
      const size_t block = ref.size() / size_t(E);  // expert e: rows [e*rows/E, (e+1)*rows/E)
      for (int e = 0; e < E; ++e) {
        std::vector<double> r(ref.begin() + e * block, ref.begin() + (e + 1) * block);
        EXPECT_LT(test::rel_error(g + e * block, r), kGradTol) << p.name << " expert " << e;
      }
    }
    // Padding rows of the vocab (wte, lm_head beyond V) are not in the reference: zero.
    for (size_t i = ref.size(); i < p.numel(); ++i) ASSERT_EQ(g[i], 0.0f) << p.name << " pad " << i;
    ++checked;
  }
  std::printf("gradients: worst norm-wise rel err %.2e (%s)\n", worst, worst_name.c_str());
  EXPECT_EQ(checked, num_tensors());
}

TEST_P(MoeReference, ThreeClippedAdamWStepsMatchPyTorch) {
  std::vector<double> ref_losses = test::read_h5(fx_, "losses");
  std::vector<double> ref_norms = test::read_h5(fx_, "grad_norm");
  for (int s = 1; s <= cfg_.train.steps; ++s) {
    StepStats st = trainer_->train_step(s);
    const double rl = ref_losses[size_t(s - 1)], rn = ref_norms[size_t(s - 1)];
    std::printf("step %d: loss rel err %.2e, grad norm rel err %.2e\n", s,
                std::fabs(st.loss - rl) / rl, std::fabs(st.grad_norm - rn) / rn);
    EXPECT_NEAR(st.loss, rl, kForwardTol * rl) << "step " << s;    // the cross-entropy alone
    EXPECT_NEAR(st.grad_norm, rn, kGradTol * rn) << "step " << s;  // of the whole objective
  }
  // Every weight after 3 steps, max |w - w_ref| in units of the summed learning rates
  // (test::kRefWeightSteps). The reference decays weight matrices and embeddings, not the
  // experts' (E, F) and (E, C) bias tensors.
  const double steps_lr = cfg_.optimizer.lr * cfg_.train.steps;  // constant schedule
  double worst = 0;
  std::string worst_name;
  int checked = 0;
  for (const ParamSpec& p : trainer_->layout().params()) {
    std::vector<double> ref = test::read_h5(fx_, "after3/" + p.name);
    const float* w = trainer_->stage().params() + p.offset;
    const double m = test::max_abs_diff(p.name, w, ref.data(), ref.size(), cfg_.model.d_model);
    EXPECT_LT(m / steps_lr, test::kRefWeightSteps) << p.name;
    if (!(m / steps_lr <= worst)) worst = m / steps_lr, worst_name = p.name;
    ++checked;
  }
  EXPECT_EQ(checked, num_tensors());
  std::printf("after 3 steps: worst max |w - w_ref| %.2e of the summed learning rates (%s)\n",
              worst, worst_name.c_str());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeReference,
                         ::testing::Values(test::MoeFixture{"gpt2", "dropless"},
                                           test::MoeFixture{"gpt2", "capacity"},
                                           test::MoeFixture{"llama", "dropless"},
                                           test::MoeFixture{"llama", "capacity"}),
                         [](const auto& info) { return info.param.label(); });

}  // namespace
}  // namespace loom
