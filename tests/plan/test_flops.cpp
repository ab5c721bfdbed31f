// Parameter counts and training FLOPs per token of Llama shapes and of GPT-2 with ffn_hidden,
// against published parameter counts and sums written out by hand.
#include <gtest/gtest.h>

#include "config/config.h"
#include "model/flops.h"
#include "tests/support/configs.h"

namespace loom {
namespace {

ModelConfig llama(int n_layer, int n_head, int n_kv_head, int d_model, int ffn, int vocab, int T,
                  bool tied) {
  ModelConfig m = test::gpt_model(n_layer, n_head, d_model, vocab, T);
  m.arch = "llama";
  m.n_kv_head = n_kv_head, m.ffn_hidden = ffn, m.tie_embeddings = tied;
  return m;
}

ModelConfig llama32_1b() { return llama(16, 32, 8, 2048, 8192, 128256, 2048, true); }
ModelConfig tinyllama() { return llama(22, 32, 4, 2048, 5632, 32000, 2048, false); }

TEST(Flops, Llama32OneBParameterCountIsThePublishedOne) {
  // meta-llama/Llama-3.2-1B: 1,235,814,400 parameters (embedding tied to the classifier).
  EXPECT_EQ(count_params(llama32_1b()), 1235814400);
  // By hand: per layer 2 x 2048 norm gains + q|k|v 2048 x (32 + 16) x 64 + o 2048 x 2048 +
  // gate|up|down 3 x 2048 x 8192 = 4,096 + 6,291,456 + 4,194,304 + 50,331,648 = 60,821,504;
  // x 16 = 973,144,064; + wte 128,256 x 2048 = 262,668,288; + the final norm 2,048.
  EXPECT_EQ(973144064LL + 262668288LL + 2048LL, 1235814400LL);
}

TEST(Flops, TinyLlamaParameterCountIsThePublishedOne) {
  // TinyLlama/TinyLlama-1.1B: 1,100,048,384 parameters (separate lm_head).
  EXPECT_EQ(count_params(tinyllama()), 1100048384);
  // By hand: per layer 4,096 + 2048 x 40 x 64 + 2048 x 2048 + 3 x 2048 x 5632 = 44,044,288;
  // x 22 = 968,974,336; wte and lm_head 2 x 32000 x 2048 = 131,072,000; final norm 2,048.
  EXPECT_EQ(968974336LL + 131072000LL + 2048LL, 1100048384LL);
  ModelConfig tied = tinyllama();
  tied.tie_embeddings = true;
  EXPECT_EQ(count_params(tinyllama()) - count_params(tied), 32000LL * 2048);
}

TEST(Flops, LlamaFlopsPerTokenByHand) {
  // 6 x parameters + 12 x L x NH x D x T (no position table to leave out).
  // Llama 3.2 1B at T 2048: 6 x 1,235,814,400 + 12 x 16 x 2048 x 2048 = 7,414,886,400 +
  // 805,306,368.
  EXPECT_DOUBLE_EQ(flops_per_token(llama32_1b()), 8220192768.0);
  // TinyLlama at T 2048, untied: the input table's 32000 x 2048 rows are looked up, not
  // multiplied: 6 x (1,100,048,384 - 65,536,000) + 12 x 22 x 2048 x 2048 = 6,207,074,304 +
  // 1,107,296,256.
  EXPECT_DOUBLE_EQ(flops_per_token(tinyllama()), 7314370560.0);
}

TEST(Flops, TheClassifierIsCountedOnceTiedOrUntied) {
  ModelConfig tied = tinyllama();
  tied.tie_embeddings = true;
  EXPECT_DOUBLE_EQ(flops_per_token(tied), flops_per_token(tinyllama()));
  ModelConfig gpt2 = test::gpt_model(12, 12, 768, 50257, 1024);
  const double tied_gpt2 = flops_per_token(gpt2);
  EXPECT_DOUBLE_EQ(tied_gpt2, 855166464.0);  // tests/train/test_mfu.cpp's hand value
  gpt2.tie_embeddings = false;
  EXPECT_DOUBLE_EQ(flops_per_token(gpt2), tied_gpt2);
}

TEST(Flops, KvHeadsShrinkTheWeightsNotTheAttentionTerm) {
  // From 8 kv heads to 32 (multi-head): k and v grow by 2 x 2048 x 24 x 64 weights per layer;
  // the scores and weighted values are per query head either way.
  ModelConfig gqa = llama32_1b(), mha = llama32_1b();
  mha.n_kv_head = 32;
  const int64_t extra = 16LL * 2 * 2048 * 24 * 64;
  EXPECT_EQ(count_params(mha) - count_params(gqa), extra);
  EXPECT_DOUBLE_EQ(flops_per_token(mha) - flops_per_token(gqa), 6.0 * extra);
  ModelConfig n_kv_absent = llama32_1b();
  n_kv_absent.n_kv_head = 0;  // absent: as many kv heads as query heads
  EXPECT_EQ(count_params(n_kv_absent), count_params(mha));
}

TEST(Flops, LlamaDefaultFfnIsTheRoundedEightThirds) {
  // ffn_hidden absent: 256 x ceil((8 x 2048 / 3) / 256) = 256 x 22 = 5632, TinyLlama's width.
  ModelConfig m = tinyllama();
  m.ffn_hidden = 0;
  EXPECT_EQ(count_params(m), 1100048384);
}

TEST(Flops, Gpt2WithFfnHiddenUsesItForTheMlp) {
  ModelConfig m = test::gpt_model(12, 12, 768, 50257, 1024);
  EXPECT_EQ(count_params(m), 124439808);
  m.ffn_hidden = 3072;  // 4 x d_model, the default
  EXPECT_EQ(count_params(m), 124439808);
  m.ffn_hidden = 2048;
  // fc (768 x 2048 + 2048) and proj (2048 x 768 + 768) instead of 4 x 768 wide: per layer
  // 1,024 x 768 x 2 + 1,024 fewer, x 12 = 18,886,656 fewer.
  EXPECT_EQ(count_params(m), 124439808 - 18886656);
  // 6 x (parameters - 1024 x 768 positions) + 12 x 12 x 768 x 1024.
  EXPECT_DOUBLE_EQ(flops_per_token(m), 6.0 * (105553152.0 - 786432.0) + 113246208.0);
}

}  // namespace
}  // namespace loom
