// validate() on the tokenizer kinds and on train.cuda_graph: one clear line per mistake.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "tests/config/validate_util.h"

using loom::Config;
using loom::test::base;
using loom::test::reports;

TEST(ConfigValidate, Tokenizer) {
  Config c = base();
  c.tokenizer.type = "gtp2";
  EXPECT_TRUE(reports(c, 1, {"tokenizer.type: 'gtp2'", "bytes, gpt2", "did you mean 'gpt2'"}));
  c.tokenizer.type = "gpt2";
  EXPECT_TRUE(reports(c, 1, {"tokenizer.vocab: '' is empty", "gpt2"}));
  EXPECT_TRUE(reports(c, 1, {"tokenizer.merges: '' is empty", "gpt2"}));
  c.tokenizer.vocab = "v.json";
  c.tokenizer.merges = "m.bpe";
  EXPECT_TRUE(loom::validate(c, 1).empty());
  c = base();
  c.model.vocab_size = 256;
  EXPECT_TRUE(reports(c, 1, {"model.vocab_size: 256", "tokenizer.type bytes", "257"}));
  // Rank files and tokenizer.json name their file in the type and use no vocab/merges.
  c = base();
  c.tokenizer.type = "tiktoken:data/tokenizer/cl100k_base.tiktoken";
  EXPECT_TRUE(loom::validate(c, 1).empty());
  c.tokenizer.type = "hf:";
  EXPECT_TRUE(reports(c, 1, {"tokenizer.type: 'hf:' names no file", "tokenizer.json"}));
  c.tokenizer.type = "hf:t.json";
  c.tokenizer.vocab = "v.json";
  EXPECT_TRUE(reports(c, 1, {"tokenizer.vocab/merges are for tokenizer.type gpt2", "hf:t.json"}));
}

TEST(ConfigValidate, CudaGraph) {
  Config c = base();
  c.train.cuda_graph = true;
  EXPECT_TRUE(reports(c, 1, {"train.cuda_graph: true needs device: cuda"}));
  c.device = "cuda";
  c.train.dtype = "fp16";  // auto loss scaling is dynamic in fp16
  const auto errs = loom::validate(c, 2);
  bool ranks = false, dynamic = false;
  for (const std::string& e : errs) {
    ranks |= e.find("captures a single-GPU step, but the grid has 2 ranks") != std::string::npos;
    dynamic |= e.find("dynamic loss scaling") != std::string::npos;
  }
  EXPECT_TRUE(ranks && dynamic) << ::testing::PrintToString(errs);
}
