// model.moe.* and parallel.ep: the nested keys parse from YAML and --set, write back with
// to_yaml, and each broken rule is one line naming the key, the value and the fix.
#include <gtest/gtest.h>

#include "config/config.h"
#include "core/check.h"
#include "tests/config/validate_util.h"

namespace {

using loom::Config;
using loom::test::base;
using loom::test::expect_one;
using loom::test::reports;

Config moe() {
  Config c = base();
  c.model.moe.num_experts = 8;
  c.model.moe.top_k = 2;
  return c;
}

// validate()'s lines but the one a build without CUDA adds for device: cuda.
std::vector<std::string> without_build_line(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  for (const auto& l : lines)
    if (l.find("built without CUDA") == std::string::npos) out.push_back(l);
  return out;
}

// On one rank with device: cuda, exactly one line besides the build's, holding every piece.
void expect_cuda_line(const Config& c, const std::vector<std::string>& pieces) {
  EXPECT_TRUE(reports(c, 1, pieces));
  EXPECT_EQ(without_build_line(loom::validate(c, 1)).size(), 1u);
}

TEST(ConfigMoe, NestedKeysParseAndRoundTrip) {
  const Config c = loom::parse_config(
      "model:\n  n_layer: 2\n  moe:\n    num_experts: 8\n    top_k: 1\n    capacity_factor: 1.25\n",
      {"model.moe.aux_loss_coef=0.02", "model.moe.z_loss_coef=0.001"}, "t.yaml");
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.moe.num_experts, 8);
  EXPECT_EQ(c.model.moe.top_k, 1);
  EXPECT_EQ(c.model.moe.capacity_factor, 1.25);
  EXPECT_EQ(c.model.moe.aux_loss_coef, 0.02);
  EXPECT_EQ(c.model.moe.z_loss_coef, 0.001);
  const Config back = loom::parse_config(loom::to_yaml(c), {}, "back.yaml");
  EXPECT_EQ(back.model.moe.num_experts, 8);
  EXPECT_EQ(back.model.moe.capacity_factor, 1.25);
  EXPECT_EQ(back.model.n_layer, 2);
  EXPECT_EQ(back.parallel.ep, 1);
}

TEST(ConfigMoe, UnknownNestedKeysAreNamed) {
  try {
    loom::parse_config("model:\n  moe:\n    num_expert: 8\n", {}, "t.yaml");
    ADD_FAILURE() << "no error";
  } catch (const loom::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("model.moe.num_expert"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("did you mean 'model.moe.num_experts'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(loom::parse_config("", {"model.moe.top=2"}, "t.yaml"), loom::UserError);
  EXPECT_THROW(loom::parse_config("", {"model.n_layer.x=2"}, "t.yaml"), loom::UserError);
}

TEST(ConfigMoe, ValidAndBroken) {
  EXPECT_TRUE(loom::validate(moe(), 1).empty());
  Config c = moe();
  c.model.moe.top_k = 9;
  expect_one(c, 1, {"model.moe.top_k: 9", "between 1 and model.moe.num_experts=8"});
  c = moe();
  c.model.moe.capacity_factor = -1;
  expect_one(c, 1, {"model.moe.capacity_factor: -1", "0 / absent for dropless"});
  c = moe();
  c.model.moe.aux_loss_coef = -0.1;
  expect_one(c, 1, {"model.moe.aux_loss_coef: -0.1 must be >= 0"});
  c = moe();
  c.model.moe.num_experts = -2;
  expect_one(c, 1, {"model.moe.num_experts: -2 must be >= 0"});
}

TEST(ConfigMoe, ExpertParallelSplitsExpertsInsideDataParallel) {
  Config c = moe();
  c.parallel.ep = 2;
  EXPECT_TRUE(loom::validate(c, 2).empty());  // dp 2 derived from the world
  c.parallel.ep = 4;
  EXPECT_TRUE(loom::validate(c, 8).empty());
  // ep not dividing the (derived) dp; not dividing the experts; without experts.
  expect_one(c, 2,
             {"parallel.ep: 4 does not divide the data-parallel size 2", "choose ep from 1, 2"});
  c.train.global_batch_size = 24;
  expect_one(
      c, 6,
      {"parallel.ep: 4 does not divide the data-parallel size 6", "choose ep from 1, 2, 3, 6"});
  c.model.moe.num_experts = 6;
  EXPECT_EQ(loom::validate(c, 8).size(), 1u);
  EXPECT_TRUE(reports(
      c, 8,
      {"parallel.ep: 4 does not divide model.moe.num_experts: 6", "choose ep from 1, 2, 3, 6"}));
  c = base();
  c.parallel.ep = 2;
  expect_one(
      c, 2,
      {"parallel.ep: 2 splits the experts of a Mixture of Experts", "model.moe.num_experts is 0"});
  c.parallel.ep = 0;
  expect_one(c, 1, {"parallel.ep", "e.g. 1"});
  c = moe();  // every ZeRO stage runs with expert parallelism (the experts shard apart)
  c.parallel.ep = 2;
  for (int zero : {1, 2, 3}) {
    c.optimizer.zero_stage = zero;
    EXPECT_TRUE(loom::validate(c, 4).empty()) << "zero " << zero;
  }
}

TEST(ConfigMoe, WhatDoesNotRunYetIsOneLine) {
  Config c = moe();
  c.parallel.cp = 2;
  expect_one(c, 2, {"parallel.cp: 2 is not supported yet", "set parallel.cp: 1"});
  c = moe();
  c.device = "tpu";
  EXPECT_TRUE(reports(c, 1, {"model.moe.num_experts: 8 needs device: cpu or cuda"}));
  // On cuda: the lines about MoE (a build without CUDA adds its own line, left out here).
  c = moe();
  c.device = "cuda";
  c.train.dtype = "bf16";
  expect_cuda_line(c, {"train.dtype: bf16 is not supported yet", "set train.dtype: fp32"});
  c.train.dtype = "fp16";
  expect_cuda_line(c, {"train.dtype: fp16 is not supported yet", "set train.dtype: fp32"});
  c.train.dtype = "fp32";
  c.train.cuda_graph = true;
  expect_cuda_line(c, {"train.cuda_graph: true cannot be captured", "train.cuda_graph: false"});
}

TEST(ConfigMoe, RunsOnCudaInFp32) {
  Config c = moe();
  c.device = "cuda";
  EXPECT_TRUE(without_build_line(loom::validate(c, 1)).empty());
  c.parallel.ep = 2;  // expert parallelism on the device communicators
  EXPECT_TRUE(without_build_line(loom::validate(c, 2)).empty());
}

}  // namespace
