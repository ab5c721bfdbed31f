// ParamLayout: shard shapes, offsets, blocks and norm ownership for several (tp, pp) layouts, and
// the experts' split over expert-parallel ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "layout/param_layout.h"
#include "model/init.h"
#include "tests/support/configs.h"

namespace loom {
namespace {

ModelConfig tiny() { return test::gpt_model(3, 4, 16, 97, 8); }

TEST(ParamLayout, SingleRankHoldsEveryCanonicalTensorWhole) {
  ModelConfig m = tiny();
  ParamLayout l(m, 1, 0, 1, 0);
  EXPECT_EQ(l.params().size(), size_t(2 + 12 * 3 + 2));
  const ParamSpec& wte = l.get("wte.weight");
  EXPECT_EQ(wte.rows, 97);
  EXPECT_EQ(wte.lrows, 128);  // padded to a multiple of 128
  size_t off = 0;
  for (const ParamSpec& p : l.params()) {
    EXPECT_EQ(p.offset, off) << p.name;
    off += p.numel();
    EXPECT_EQ(p.decay, p.ndim == 2) << p.name;
    EXPECT_TRUE(p.norm_owner) << p.name;
  }
  EXPECT_EQ(off, l.total());
}

TEST(ParamLayout, SplitLayersEvenAndExplicit) {
  EXPECT_EQ(split_layers(5, 2, {}), (std::vector<int>{3, 2}));
  EXPECT_EQ(split_layers(8, 4, {}), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(split_layers(5, 2, {1, 4}), (std::vector<int>{1, 4}));
  ModelConfig m = tiny();
  ParamLayout last(m, 1, 0, 2, 1, {1, 2});
  EXPECT_EQ(last.layers().first_layer, 1);
  EXPECT_EQ(last.layers().num_layers, 2);
  EXPECT_EQ(last.find("wpe.weight"), nullptr);
  ASSERT_NE(last.find("wte.weight"), nullptr);      // tied copy on the last stage
  EXPECT_FALSE(last.get("wte.weight").norm_owner);  // counted on stage 0
  EXPECT_NE(last.find("ln_f.weight"), nullptr);
}

// Every canonical element is covered by exactly one TP rank's blocks (or by all, replicated).
TEST(ParamLayout, TensorParallelBlocksTileEveryTensor) {
  ModelConfig m = tiny();
  for (int tp : {2, 4}) {
    std::map<std::string, std::vector<int>> cover;  // name -> count per canonical element
    std::map<std::string, bool> replicated;
    for (int r = 0; r < tp; ++r) {
      ParamLayout l(m, tp, r, 1, 0);
      for (const ParamSpec& p : l.params()) {
        auto& c = cover[p.name];
        c.resize(size_t(p.rows * p.cols));
        replicated[p.name] = p.shard == Shard::Replicated;
        EXPECT_EQ(p.norm_owner, p.shard != Shard::Replicated || r == 0) << p.name;
        for (const ShardBlock& b : l.blocks(p)) {
          EXPECT_LE(b.lrow + b.rows, p.lrows);
          EXPECT_LE(b.lcol + b.cols, p.lcols);
          for (int64_t i = 0; i < b.rows; ++i)
            for (int64_t j = 0; j < b.cols; ++j) c[size_t((b.grow + i) * p.cols + b.gcol + j)]++;
        }
      }
    }
    for (auto& [name, c] : cover)
      for (size_t i = 0; i < c.size(); ++i)
        ASSERT_EQ(c[i], replicated[name] ? tp : 1) << name << " element " << i << " tp=" << tp;
  }
}

// Mixture of Experts over tp x ep: every element of an expert tensor is held by exactly one
// (tp rank, ep rank) (replicated expert tensors: by one per ep rank's experts, on every tp rank);
// the other tensors are unchanged by ep; expert_runs cuts the flat buffer at the experts.
TEST(ParamLayout, ExpertParallelBlocksTileTheExperts) {
  for (bool llama : {false, true}) {
    ModelConfig m = tiny();
    if (llama) m.arch = "llama";
    m.moe.num_experts = 4;
    m.moe.top_k = 2;
    for (int tp : {1, 2})
      for (int ep : {2, 4}) {
        std::map<std::string, std::vector<int>> cover;
        std::map<std::string, int> holders;  // ranks that hold each element, when whole
        for (int t = 0; t < tp; ++t)
          for (int e = 0; e < ep; ++e) {
            ParamLayout l(m, tp, t, 1, 0, 1, {}, ep, e);
            ParamLayout dense(m, tp, t, 1, 0, 1, {});
            size_t expert_elems = 0;
            for (const ParamSpec& p : l.params()) {
              EXPECT_EQ(p.expert, p.name.find(".mlp.experts.") != std::string::npos) << p.name;
              const ParamSpec& d = dense.get(p.name);
              EXPECT_EQ(p.lrows * (p.expert ? ep : 1), d.lrows) << p.name;
              EXPECT_EQ(p.lcols, d.lcols) << p.name;
              if (p.expert) expert_elems += p.numel();
              auto& c = cover[p.name];
              c.resize(size_t(p.rows * p.cols));
              holders[p.name] = p.shard == Shard::Replicated ? tp : 1;
              for (const ShardBlock& b : l.blocks(p)) {
                EXPECT_LE(b.lrow + b.rows, p.lrows) << p.name;
                for (int64_t i = 0; i < b.rows; ++i)
                  for (int64_t j = 0; j < b.cols; ++j)
                    c[size_t((b.grow + i) * p.cols + b.gcol + j)]++;
              }
            }
            size_t runs_expert = 0, at = 0;
            for (const auto& r : l.expert_runs(0, l.total())) {
              EXPECT_EQ(r.lo, at);
              at = r.hi;
              if (r.expert) runs_expert += r.hi - r.lo;
            }
            EXPECT_EQ(at, l.total());
            EXPECT_EQ(runs_expert, expert_elems);
            EXPECT_EQ(l.expert_runs(0, l.total()).size(), size_t(2 * m.n_layer + 1));
          }
        for (auto& [name, c] : cover) {
          const bool expert = name.find(".mlp.experts.") != std::string::npos;
          const int want = expert ? holders[name] : holders[name] * ep;
          for (size_t i = 0; i < c.size(); ++i)
            ASSERT_EQ(c[i], want) << name << " element " << i << " tp=" << tp << " ep=" << ep;
        }
      }
  }
}

TEST(ParamLayout, QkvShardTakesWholeHeadsOfEachPart) {
  ModelConfig m = tiny();  // C=16, 4 heads of 4
  ParamLayout l(m, 2, 1, 1, 0);
  auto blocks = l.blocks(l.get("h.0.attn.c_attn.weight"));
  ASSERT_EQ(blocks.size(), 3u);
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(blocks[size_t(j)].gcol, j * 16 + 8);  // heads 2,3 of q, k, v
    EXPECT_EQ(blocks[size_t(j)].lcol, j * 8);
    EXPECT_EQ(blocks[size_t(j)].cols, 8);
  }
}

// Initialization is a function of the canonical element only: tp2 shards equal slices of tp1.
TEST(Init, LayoutIndependent) {
  ModelConfig m = tiny();
  ParamLayout full(m, 1, 0, 1, 0);
  std::vector<float> w(full.total());
  init_params(full, m, 7, w.data());
  for (int r = 0; r < 2; ++r) {
    ParamLayout l(m, 2, r, 1, 0);
    std::vector<float> s(l.total());
    init_params(l, m, 7, s.data());
    for (const ParamSpec& p : l.params()) {
      const ParamSpec& f = full.get(p.name);
      for (const ShardBlock& b : l.blocks(p))
        for (int64_t i = 0; i < b.rows; ++i)
          for (int64_t j = 0; j < b.cols; ++j)
            ASSERT_EQ(s[p.offset + size_t((b.lrow + i) * p.lcols + b.lcol + j)],
                      w[f.offset + size_t((b.grow + i) * f.lcols + b.gcol + j)])
                << p.name;
    }
  }
  // Statistics: matrices ~ N(0, 0.02), gains 1, biases 0.
  const ParamSpec& fc = full.get("h.0.mlp.c_fc.weight");
  double s2 = 0;
  for (size_t i = 0; i < fc.numel(); ++i) s2 += double(w[fc.offset + i]) * w[fc.offset + i];
  EXPECT_NEAR(std::sqrt(s2 / double(fc.numel())), 0.02, 0.003);
  EXPECT_EQ(w[full.get("h.1.ln_2.weight").offset], 1.0f);
  EXPECT_EQ(w[full.get("h.1.ln_2.bias").offset], 0.0f);
  EXPECT_EQ(w[full.get("wte.weight").offset + 97 * 16], 0.0f);  // padding row
}

}  // namespace
}  // namespace loom
