// loom plan end to end through cmd_plan: text, JSON, config/cluster errors, no-fit error.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/plan_command.h"
#include "core/check.h"
#include "parallel/collective.h"
#include "tests/plan/run_plan_command.h"
#include "tests/support/fixture.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

cli::Args plan_args(const std::string& config, const std::string& cluster, bool json = false) {
  cli::Args a;
  a.command = "plan";
  a.operands = {test::source_path(config)};
  if (!cluster.empty()) a.options["--cluster"] = test::source_path(cluster);
  if (json) a.options["--json"] = "1";
  return a;
}

using test::run_plan_command;

TEST(PlanCli, TextTableForGpt2SmallOnOneH100Node) {
  int code = 0;
  std::string err;
  const std::string out = run_plan_command(
      plan_args("configs/gpt2_124m.yaml", "configs/clusters/h100_80g_8x.yaml"), &code, &err);
  EXPECT_EQ(code, 0) << err;
  EXPECT_NE(out.find("loom plan:"), std::string::npos) << out;
  EXPECT_NE(out.find("124.4M parameters"), std::string::npos) << out;
  EXPECT_NE(out.find("precision: bf16 mixed"), std::string::npos) << out;
  EXPECT_NE(out.find("tp 8 does not divide n_head 12"), std::string::npos) << out;
  EXPECT_NE(out.find("MFU"), std::string::npos) << out;
}

// The shipped Llama shapes: their published parameter counts, GQA in the model line, and
// TinyLlama's 4 kv heads ruling out tp 8 in validation's words.
TEST(PlanCli, LlamaConfigsOnOneH100Node) {
  int code = 0;
  std::string err;
  std::string out = run_plan_command(
      plan_args("configs/llama3.2_1b.yaml", "configs/clusters/h100_80g_8x.yaml"), &code, &err);
  EXPECT_EQ(code, 0) << err;
  EXPECT_NE(out.find("model: llama 16L 32H (8 kv) d_model 2048 ffn 8192 vocab 128256, 1235.8M "
                     "parameters"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("grids (0 impossible)"), std::string::npos) << out;
  out = run_plan_command(
      plan_args("configs/tinyllama_1.1b.yaml", "configs/clusters/h100_80g_8x.yaml"), &code, &err);
  EXPECT_EQ(code, 0) << err;
  EXPECT_NE(out.find("1100.0M parameters"), std::string::npos) << out;
  EXPECT_NE(out.find("dp 1 pp 1 tp 8: parallel.tp: 8 does not divide the 4 kv heads"),
            std::string::npos)
      << out;
}

TEST(PlanCli, JsonForScripts) {
  int code = 0;
  std::string err;
  const std::string out = run_plan_command(
      plan_args("configs/gpt2_124m.yaml", "configs/clusters/cpu_2core.yaml", true), &code, &err);
  EXPECT_EQ(code, 0) << err;
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["precision"], "fp32");
  EXPECT_EQ(j["cluster"]["devices"], 2);
  ASSERT_FALSE(j["valid"].empty());
  EXPECT_GT(j["valid"][0]["tokens_per_s"].get<double>(), 0.0);
  EXPECT_FALSE(j.contains("error"));
}

TEST(PlanCli, TooBigAModelSaysWhatIsShort) {
  cli::Args a = plan_args("configs/gpt2_124m.yaml", "configs/clusters/h100_80g_8x.yaml");
  a.overrides = {"model.n_layer=96",   "model.n_head=96",          "model.d_model=12288",
                 "model.seq_len=2048", "model.max_positions=2048", "train.global_batch_size=64"};
  int code = 0;
  std::string err;
  const std::string out = run_plan_command(a, &code, &err);
  EXPECT_NE(err.find("no layout fits"), std::string::npos) << err;
  EXPECT_NE(err.find("device memory is short by"), std::string::npos) << err;
  EXPECT_NE(out.find("rejected for memory"), std::string::npos) << out;
}

TEST(PlanCli, BadConfigAndClusterAreOneClearError) {
  int code = 0;
  std::string err;
  cli::Args a = plan_args("configs/gpt2_124m.yaml", "configs/clusters/h100_80g_8x.yaml");
  a.overrides = {"model.d_model=770"};
  run_plan_command(a, &code, &err);
  EXPECT_EQ(code, 1);  // validate()'s lines were printed on stderr
  a = plan_args("configs/gpt2_124m.yaml", "configs/gpt2_124m.yaml");  // not a cluster file
  run_plan_command(a, &code, &err);
  EXPECT_NE(err.find("unknown key"), std::string::npos) << err;
  a = plan_args("configs/gpt2_124m.yaml", "configs/clusters/missing.yaml");
  run_plan_command(a, &code, &err);
  EXPECT_NE(err.find("cannot read cluster file"), std::string::npos) << err;
  a.operands.clear();
  run_plan_command(a, &code, &err);
  EXPECT_NE(err.find("loom plan needs one config file"), std::string::npos) << err;
}

// parallel.cp on the command line is treated as pp, dp and tp are: the plan searches every cp,
// so a configured cp (even one seq_len cannot take: 1024 % 6) changes nothing; --kernels models
// whole sequences on one rank and says how to ask for them.
TEST(PlanCli, ParallelCpOnTheCommandLine) {
  int code = 0;
  std::string err;
  cli::Args a = plan_args("configs/gpt2_124m.yaml", "configs/clusters/h100_80g_8x.yaml", true);
  const std::string plain = run_plan_command(a, &code, &err);
  EXPECT_EQ(code, 0) << err;
  a.overrides = {"parallel.cp=3"};
  const std::string with_cp = run_plan_command(a, &code, &err);
  EXPECT_EQ(code, 0) << err;
  EXPECT_EQ(with_cp, plain);
  auto j = nlohmann::json::parse(with_cp);
  bool cp2 = false;
  for (const auto& e : j["valid"]) cp2 = cp2 || e["cp"].get<int>() == 2;
  EXPECT_TRUE(cp2);
  EXPECT_EQ(j["search"]["min_cp_chunk"], 256);

  a = plan_args("configs/gpt2_124m.yaml", "");
  a.options["--kernels"] = "1";
  a.overrides = {"parallel.cp=2"};
  run_plan_command(a, &code, &err);
  EXPECT_NE(err.find("--set parallel.cp=1"), std::string::npos) << err;
}

// --ranks N plans for N devices (whole nodes, or one node of fewer); --layout-args prints the
// fastest layout of the largest world of at most N ranks that fits, as loom train arguments.
TEST(PlanCli, RanksAndLayoutArgs) {
  int code = 0;
  std::string err;
  cli::Args a = plan_args("configs/gpt2_124m.yaml", "configs/clusters/h100_80g_8x.yaml", true);
  a.options["--ranks"] = "16";
  auto j = nlohmann::json::parse(run_plan_command(a, &code, &err));
  EXPECT_EQ(code, 0) << err;
  EXPECT_EQ(j["cluster"]["devices"], 16);
  a.options["--ranks"] = "4";
  j = nlohmann::json::parse(run_plan_command(a, &code, &err));
  EXPECT_EQ(j["cluster"]["devices"], 4);
  ASSERT_FALSE(j["valid"].empty());
  const auto& best = j["valid"][0];
  a.options["--ranks"] = "12";
  run_plan_command(a, &code, &err);
  EXPECT_NE(err.find("--ranks 12: "), std::string::npos) << err;
  EXPECT_NE(err.find("give a multiple of 8 or at most 8"), std::string::npos) << err;

  a.options.erase("--json");
  a.options["--layout-args"] = "1";
  a.options["--ranks"] = "7";  // fewer than a node of 8: one node of 7
  std::string out = run_plan_command(a, &code, &err);
  EXPECT_EQ(code, 0) << err;
  EXPECT_EQ(out.substr(0, 2), "7 ") << out;
  a.options["--ranks"] = "4";
  out = run_plan_command(a, &code, &err);
  const std::string want = str(
      "4 --set parallel.dp=", best["dp"].get<int>(), " --set parallel.pp=", best["pp"].get<int>(),
      " --set parallel.tp=", best["tp"].get<int>(), " --set parallel.cp=", best["cp"].get<int>(),
      " --set parallel.virtual_stages=", best["virtual_stages"].get<int>(),
      " --set parallel.micro_batch_size=", best["micro_batch"].get<int>(),
      " --set parallel.sequence_parallel=",
      best["sequence_parallel"].get<bool>() ? "true" : "false",
      " --set parallel.ep=", best["expert_parallel"].get<int>(),
      " --set optimizer.zero_stage=", best["zero"].get<int>(),
      " --set train.recompute=", best["recompute"].get<std::string>(), "\n");
  EXPECT_EQ(out, want);
  a.options.erase("--ranks");
  run_plan_command(a, &code, &err);
  EXPECT_NE(err.find("give --ranks N and drop --json"), std::string::npos) << err;
  a.options["--ranks"] = "0";
  run_plan_command(a, &code, &err);
  EXPECT_NE(err.find("--ranks: expected a whole number >= 1, got '0'"), std::string::npos) << err;
  // A model no world of at most 2 H100s holds: one error naming the shortage at 2 ranks.
  a.options["--ranks"] = "2";
  a.overrides = {"model.n_layer=96", "model.n_head=96", "model.d_model=12288"};
  run_plan_command(a, &code, &err);
  EXPECT_NE(err.find("no layout of 2 or fewer ranks"), std::string::npos) << err;
  EXPECT_NE(err.find("device memory is short by"), std::string::npos) << err;
}

}  // namespace
}  // namespace loom
