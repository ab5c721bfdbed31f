// validate() on the tokenizer kinds, train.cuda_graph and parallel.sequence_parallel: one clear
// line per mistake.
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

TEST(ConfigValidate, SequenceParallelNeedsTensorParallelAndSplitRows) {
  Config c = base();
  c.parallel.sequence_parallel = true;
  EXPECT_TRUE(reports(c, 1, {"parallel.sequence_parallel needs parallel.tp > 1"}));
  EXPECT_EQ(loom::validate(c, 1).size(), 1u);
  c.parallel.tp = 2;
  EXPECT_TRUE(loom::validate(c, 2).empty());
  // 1 x 30 token rows do not split over tp 4.
  c.parallel.tp = 4;
  c.model.seq_len = 30;
  EXPECT_TRUE(reports(
      c, 4, {"parallel.sequence_parallel: micro_batch_size=1 x model.seq_len=30", "over tp=4"}));
  c.parallel.micro_batch_size = 3;  // 90 rows: still not
  c.train.global_batch_size = 9;
  EXPECT_TRUE(reports(c, 4, {"= 90 token rows do not split over tp=4"}));
  c.parallel.micro_batch_size = 2;  // 60 rows split
  c.train.global_batch_size = 8;
  EXPECT_TRUE(loom::validate(c, 4).empty());
  c.model.seq_len = 32;
  EXPECT_TRUE(loom::validate(c, 4).empty());
}
