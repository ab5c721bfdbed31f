// Cluster files: shipped ones parse; each bad input is one message naming file and key.
#include <gtest/gtest.h>

#include "core/check.h"
#include "plan/cluster.h"
#include "tests/support/fixture.h"

namespace loom {
namespace {

using plan::ClusterSpec;

const char* kGood =
    "nodes: 2\ngpus_per_node: 8\ngpu_memory_gib: 80\npeak_flops: 989e12\n"
    "intra_node: {bandwidth_gbps: 3600, latency_us: 2}\n"
    "inter_node: {bandwidth_gbps: 400, latency_us: 5}\n";

// The message of parsing `text` as "bad.yaml" ("" when it parses).
std::string error_of(const std::string& text) {
  try {
    plan::parse_cluster(text, "bad.yaml");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

void expect_error(const std::string& text, const std::string& want) {
  const std::string msg = error_of(text);
  EXPECT_NE(msg.find("cluster file bad.yaml"), std::string::npos) << msg;
  EXPECT_NE(msg.find(want), std::string::npos) << "wanted '" << want << "' in: " << msg;
}

TEST(Cluster, ShippedFilesParse) {
  ClusterSpec h = plan::load_cluster(test::source_path("configs/clusters/h100_80g_8x.yaml"));
  EXPECT_EQ(h.device, "cuda");
  EXPECT_EQ(h.world(), 8);
  EXPECT_DOUBLE_EQ(h.peak_flops, 989.4e12);
  EXPECT_DOUBLE_EQ(h.intra_node.bytes_per_s(), 450e9);
  EXPECT_DOUBLE_EQ(h.inter_node.bytes_per_s(), 50e9);
  ClusterSpec big = plan::load_cluster(test::source_path("configs/clusters/h100_80g_8x_128n.yaml"));
  EXPECT_EQ(big.world(), 1024);
  ClusterSpec a = plan::load_cluster(test::source_path("configs/clusters/a100_80g_8x.yaml"));
  EXPECT_DOUBLE_EQ(a.peak_flops, 312e12);
  ClusterSpec c = plan::load_cluster(test::source_path("configs/clusters/cpu_2core.yaml"));
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.world(), 2);
}

TEST(Cluster, DefaultsAndDescription) {
  ClusterSpec c = plan::parse_cluster(kGood, "good.yaml");
  EXPECT_EQ(c.name, "good");
  EXPECT_EQ(c.device, "cuda");
  EXPECT_DOUBLE_EQ(c.efficiency, 0.5);
  EXPECT_DOUBLE_EQ(c.reserved_gib, 0.0);
  EXPECT_EQ(c.world(), 16);
  EXPECT_NE(plan::describe(c).find("2 nodes x 8 devices = 16"), std::string::npos);
}

TEST(Cluster, MissingKeysAreNamed) {
  expect_error(replaced(kGood, "gpu_memory_gib: 80\n", ""), "gpu_memory_gib: missing");
  expect_error(replaced(kGood, "nodes: 2\n", ""), "nodes: missing");
  expect_error(replaced(kGood, "inter_node: {bandwidth_gbps: 400, latency_us: 5}\n", ""),
               "inter_node: missing");
  expect_error(replaced(kGood, "bandwidth_gbps: 3600, ", ""), "intra_node.bandwidth_gbps: missing");
}

TEST(Cluster, NonPositiveValuesAreRejected) {
  expect_error(replaced(kGood, "nodes: 2", "nodes: 0"), "nodes: 0 must be > 0");
  expect_error(replaced(kGood, "gpus_per_node: 8", "gpus_per_node: -8"),
               "gpus_per_node: -8 must be > 0");
  expect_error(replaced(kGood, "peak_flops: 989e12", "peak_flops: 0"), "peak_flops: 0 must be > 0");
  expect_error(replaced(kGood, "latency_us: 5", "latency_us: -1"),
               "inter_node.latency_us: -1 must be > 0");
  expect_error(replaced(kGood, "bandwidth_gbps: 3600", "bandwidth_gbps: 0"),
               "intra_node.bandwidth_gbps: 0 must be > 0");
  expect_error(std::string(kGood) + "efficiency: 1.5\n", "efficiency: 1.5 must be <= 1");
  expect_error(std::string(kGood) + "reserved_gib: -1\n", "reserved_gib: -1 must be >= 0");
  expect_error(std::string(kGood) + "reserved_gib: 90\n", "must be less than gpu_memory_gib");
}

TEST(Cluster, WrongTypesAndUnknownKeys) {
  expect_error(replaced(kGood, "nodes: 2", "nodes: 1.5"), "nodes: 1.5 must be a whole number");
  expect_error(replaced(kGood, "peak_flops: 989e12", "peak_flops: lots"),
               "peak_flops: expected a number, got 'lots'");
  expect_error(replaced(kGood, "gpus_per_node", "gpus_per_nod"),
               "gpus_per_nod: unknown key; known keys are");
  const std::string typo = error_of(replaced(kGood, "gpus_per_node", "gpus_per_nod"));
  EXPECT_NE(typo.find("did you mean 'gpus_per_node'"), std::string::npos) << typo;
  expect_error(replaced(kGood, "latency_us: 2", "latency: 2"), "intra_node.latency: unknown key");
  expect_error(
      replaced(kGood, "inter_node: {bandwidth_gbps: 400, latency_us: 5}", "inter_node: 400"),
      "inter_node: expected a mapping");
  expect_error(std::string(kGood) + "device: tpu\n", "device: 'tpu' is not valid");
  expect_error("- 1\n- 2\n", "expected a mapping of keys");
  expect_error("nodes: [1\n", "YAML syntax error");
}

TEST(Cluster, UnreadableFile) {
  try {
    plan::load_cluster("/nonexistent/cluster.yaml");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read cluster file '/nonexistent/cluster.yaml'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace loom
