// The llama family's model keys: their defaults, and one clear line for each bad value.
#include <gtest/gtest.h>

#include "config/config.h"
#include "tests/config/validate_util.h"

namespace loom {
namespace {

using test::base;
using test::reports;

Config llama() {
  Config c = base();
  c.model.arch = "llama";
  c.model.n_kv_head = 2;
  c.model.tie_embeddings = false;
  return c;
}

TEST(LlamaConfig, DefaultsFollowTheFamily) {
  const Config g = parse_config("model:\n  d_model: 2048\n  n_head: 32\n", {}, "g.yaml");
  EXPECT_TRUE(g.model.tie_embeddings);
  EXPECT_EQ(g.model.ffn(), 4 * 2048);
  EXPECT_EQ(g.model.kv_heads(), 32);
  const Config l =
      parse_config("model:\n  arch: llama\n  d_model: 2048\n  n_head: 32\n", {}, "l.yaml");
  EXPECT_FALSE(l.model.tie_embeddings);  // llama's default
  EXPECT_EQ(l.model.ffn(), 5632);        // 8*2048/3 = 5461, rounded up to a multiple of 256
  EXPECT_EQ(l.model.head_dim(), 64);
  EXPECT_EQ(l.model.rope_theta, 10000.0);
  EXPECT_EQ(l.model.norm_eps, 1e-5);
  // Said in the file, or by --set, the tie stays.
  const Config t = parse_config("model:\n  arch: llama\n  tie_embeddings: true\n", {}, "t.yaml");
  EXPECT_TRUE(t.model.tie_embeddings);
  const Config s = parse_config("model:\n  arch: llama\n", {"model.tie_embeddings=true"}, "s");
  EXPECT_TRUE(s.model.tie_embeddings);
  EXPECT_TRUE(validate(llama(), 1).empty());
}

TEST(LlamaConfig, ArchIsOneOfTheFamilies) {
  Config c = base();
  c.model.arch = "lama";
  EXPECT_TRUE(reports(c, 1, {"model.arch: 'lama' is not valid", "gpt2, llama", "'llama'"}));
}

TEST(LlamaConfig, KvHeadsDivideHeads) {
  Config c = llama();
  c.model.n_kv_head = 3;
  EXPECT_TRUE(reports(
      c, 1,
      {"model.n_kv_head: 3 does not divide model.n_head=4", "choose n_kv_head from 1, 2, 4"}));
  c.model.n_kv_head = -1;
  EXPECT_TRUE(reports(c, 1, {"model.n_kv_head: -1 must be >= 0"}));
}

TEST(LlamaConfig, TensorParallelSplitsWholeKvHeads) {
  Config c = llama();  // 4 query heads, 2 kv heads
  c.parallel.tp = 4;
  EXPECT_TRUE(reports(c, 4,
                      {"parallel.tp: 4 does not divide the 2 kv heads (model.n_kv_head)",
                       "never replicated", "choose tp from 1, 2"}));
  c.parallel.tp = 2;
  EXPECT_TRUE(validate(c, 2).empty());
}

TEST(LlamaConfig, MlpWidthSplitsOverTensorParallel) {
  Config c = llama();
  c.model.ffn_hidden = 33;
  c.parallel.tp = 2;
  EXPECT_TRUE(reports(
      c, 2,
      {"parallel.tp: 2 does not divide the MLP width 33 (model.ffn_hidden)", "choose tp from 1"}));
}

TEST(LlamaConfig, RopeNeedsEvenHeadsAndAPositiveBase) {
  Config c = llama();
  c.model.n_head = 2, c.model.n_kv_head = 1, c.model.d_model = 6;  // head size 3
  EXPECT_TRUE(reports(c, 1, {"head size d_model/n_head = 3 is odd"}));
  c = llama();
  c.model.rope_theta = 0;
  EXPECT_TRUE(reports(c, 1, {"model.rope_theta: 0 must be > 0", "500000"}));
  c = llama();
  c.model.norm_eps = 0;
  EXPECT_TRUE(reports(c, 1, {"model.norm_eps: 0 must be in (0, 1)"}));
  c = llama();
  c.model.max_positions = 64;
  EXPECT_TRUE(reports(c, 1, {"model.max_positions: 64 has no effect on llama"}));
}

TEST(LlamaConfig, Gpt2RefusesLlamaOnlyValues) {
  Config c = base();
  c.model.n_kv_head = 2;
  EXPECT_TRUE(reports(c, 1, {"model.n_kv_head: 2 needs model.arch: llama"}));
  c = base();
  c.model.n_kv_head = 4;  // = n_head: plain multi-head attention, allowed
  EXPECT_TRUE(validate(c, 1).empty());
  c.model.norm_eps = 1e-6;
  EXPECT_TRUE(reports(c, 1, {"model.norm_eps: 1e-06 is fixed at 1e-5 for gpt2"}));
}

}  // namespace
}  // namespace loom
