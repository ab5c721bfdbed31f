// ParamLayout of the llama family: the tensors (no biases, no position table), their shapes, and
// the tensor-parallel blocks of the grouped q|k|v and gate|up columns.
#include <gtest/gtest.h>

#include "layout/param_layout.h"

namespace loom {
namespace {

// C 32, 4 query heads and 2 kv heads of size 8, SwiGLU width 24, vocab 97.
ModelConfig llama() {
  ModelConfig m;
  m.arch = "llama";
  m.n_layer = 2, m.n_head = 4, m.n_kv_head = 2, m.d_model = 32, m.ffn_hidden = 24;
  m.vocab_size = 97, m.seq_len = 8, m.tie_embeddings = false;
  return m;
}

TEST(LlamaParamLayout, TensorsAndShapes) {
  ParamLayout l(llama(), 1, 0, 1, 0);
  EXPECT_EQ(l.params().size(), size_t(1 + 6 * 2 + 2));
  EXPECT_EQ(l.find("wpe.weight"), nullptr);
  EXPECT_EQ(l.find("h.0.attn.c_attn.bias"), nullptr);
  EXPECT_EQ(l.find("ln_f.bias"), nullptr);
  const ParamSpec& qkv = l.get("h.1.attn.c_attn.weight");
  EXPECT_EQ(qkv.rows, 32);
  EXPECT_EQ(qkv.cols, (4 + 2 * 2) * 8);
  EXPECT_EQ(l.get("h.1.attn.c_proj.weight").rows, 32);
  EXPECT_EQ(l.get("h.1.mlp.c_fc.weight").cols, 48);
  EXPECT_EQ(l.get("h.1.mlp.c_proj.weight").rows, 24);
  EXPECT_EQ(l.get("lm_head.weight").lrows, 128);
  ModelConfig tied = llama();
  tied.tie_embeddings = true;
  EXPECT_EQ(ParamLayout(tied, 1, 0, 1, 0).find("lm_head.weight"), nullptr);
}

// On tp2 rank 1: q heads 2-3 (columns 16..31), kv head 1 of k (40..47) and of v (56..63), the
// second halves of gate (12..23) and up (36..47), packed in that order.
TEST(LlamaParamLayout, TensorParallelTakesEveryPartsSlice) {
  ParamLayout l(llama(), 2, 1, 1, 0);
  const ParamSpec& qkv = l.get("h.0.attn.c_attn.weight");
  EXPECT_EQ(qkv.lcols, 32);
  const std::vector<ShardBlock> b = l.blocks(qkv);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].gcol, 16);
  EXPECT_EQ(b[0].lcol, 0);
  EXPECT_EQ(b[0].cols, 16);
  EXPECT_EQ(b[1].gcol, 40);
  EXPECT_EQ(b[1].lcol, 16);
  EXPECT_EQ(b[1].cols, 8);
  EXPECT_EQ(b[2].gcol, 56);
  EXPECT_EQ(b[2].lcol, 24);
  EXPECT_EQ(b[2].cols, 8);
  const ParamSpec& fc = l.get("h.0.mlp.c_fc.weight");
  EXPECT_EQ(fc.shard, Shard::GateUpCols);
  const std::vector<ShardBlock> g = l.blocks(fc);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].gcol, 12);
  EXPECT_EQ(g[0].lcol, 0);
  EXPECT_EQ(g[0].cols, 12);
  EXPECT_EQ(g[1].gcol, 36);
  EXPECT_EQ(g[1].lcol, 12);
  EXPECT_EQ(g[1].cols, 12);
  const ParamSpec& down = l.get("h.0.mlp.c_proj.weight");
  ASSERT_EQ(l.blocks(down).size(), 1u);
  EXPECT_EQ(l.blocks(down)[0].grow, 12);
  EXPECT_EQ(down.lrows, 12);
}

// Every canonical element of every tensor is held by exactly one TP rank (or all, replicated).
TEST(LlamaParamLayout, BlocksTileEveryTensor) {
  for (int tp : {1, 2}) {
    std::map<std::string, std::vector<int>> cover;
    for (int r = 0; r < tp; ++r) {
      ParamLayout l(llama(), tp, r, 1, 0);
      for (const ParamSpec& p : l.params()) {
        auto& c = cover[p.name];
        c.resize(size_t(p.rows * p.cols));
        for (const ShardBlock& b : l.blocks(p))
          for (int64_t i = 0; i < b.rows; ++i)
            for (int64_t j = 0; j < b.cols; ++j) c[size_t((b.grow + i) * p.cols + b.gcol + j)]++;
      }
    }
    for (const auto& [name, c] : cover) {
      const bool replicated = name.find("ln_") != std::string::npos;
      for (int n : c) ASSERT_EQ(n, replicated ? tp : 1) << name << " tp" << tp;
    }
  }
}

}  // namespace
}  // namespace loom
