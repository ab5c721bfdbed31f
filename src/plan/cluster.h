// ClusterSpec: the machines `loom plan` models, read strictly from a YAML cluster file.
#pragma once
#include <cstdint>
#include <string>

namespace loom::plan {

// One kind of link: bandwidth per GPU per direction in Gbit/s, latency per message in us.
struct LinkSpec {
  double bandwidth_gbps = 0;
  double latency_us = 0;
  double bytes_per_s() const { return bandwidth_gbps * 1e9 / 8.0; }
  double latency_s() const { return latency_us * 1e-6; }
};

struct ClusterSpec {
  std::string name;    // optional label; the file name when absent
  std::string source;  // the file it was read from (for messages)
  std::string device = "cuda";  // cuda: loom's cuda backend (bf16); cpu: MPI ranks on cores
  int nodes = 0;
  int gpus_per_node = 0;       // devices (cpu: ranks) per node
  double gpu_memory_gib = 0;   // memory of one device
  double peak_flops = 0;       // dense peak of one device in the training dtype, FLOP/s
  double efficiency = 0.5;     // fraction of peak the kernels reach (compute time only)
  double reserved_gib = 0;     // per device, outside loom's buffers (CUDA context, NCCL, ...)
  LinkSpec intra_node, inter_node;

  int world() const { return nodes * gpus_per_node; }
  double memory_bytes() const { return gpu_memory_gib * 1073741824.0; }
  double reserved_bytes() const { return reserved_gib * 1073741824.0; }
};

// Parses a cluster file. Keys: nodes, gpus_per_node, gpu_memory_gib, peak_flops,
// intra_node {bandwidth_gbps, latency_us}, inter_node {bandwidth_gbps, latency_us}, and the
// optional name, device (cuda | cpu, default cuda), efficiency (0 < e <= 1, default 0.5) and
// reserved_gib (>= 0, default 0).
// Unknown keys, missing keys and non-positive values throw UserError naming the file and key.
ClusterSpec load_cluster(const std::string& path);
ClusterSpec parse_cluster(const std::string& yaml_text, const std::string& source);

// One line: "1 node x 8 GPUs (8), 80 GiB, 989 TFLOP/s x 0.50, intra 3600 Gb/s 2 us, ...".
std::string describe(const ClusterSpec& c);

}  // namespace loom::plan
