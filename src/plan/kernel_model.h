// Speed-of-light model of one training step on one GPU: kernels' FLOPs, bytes, roofline time, MFU.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"

namespace loom::plan {

struct KernelShape;

// The roofs of one GPU. Defaults: H100 SXM (dense bf16 tensor cores, fp32 CUDA cores, HBM3).
struct GpuRoof {
  double tensor_flops = 989e12;  // GEMMs (and attention on tensor cores)
  double attention_flops = 0;    // attention's matmuls; 0: as loom's kernels run them (below)
  double vector_flops = 67e12;   // elementwise and reduction kernels (fp32 CUDA cores)
  double bandwidth = 3.35e12;    // HBM bytes/s
  double launch_s = 3e-6;        // per kernel launch (and per device memset/copy)
  // attention_flops when set; else tensor_flops for 16-bit activations with head size 64 or 128
  // (kernels/attention_tc.cu, tensor cores), vector_flops otherwise (the fp32 CUDA-core kernel).
  double attention(const KernelShape& s) const;
};

// What one rank runs per optimizer step: m micro-batches of B sequences of T tokens through
// every layer (one pipeline stage), the model's columns and heads split over tp.
struct KernelShape {
  ModelConfig model;
  int micro_batch = 1;    // B
  int micro_batches = 1;  // m: gradient-accumulation micro-batches per step
  int tp = 1;
  int act_bytes = 2;  // activations and compute weights (bf16/fp16: 2, fp32: 4)
};

// Which roof a kernel's FLOPs are held against.
enum class Unit { Tensor, Attention, Vector };

struct KernelCost {
  std::string name;
  std::string part;  // "embedding", "block", "head", "optimizer"
  Unit unit = Unit::Vector;
  double calls = 0;  // launches per step
  double flops = 0;  // per step
  double bytes = 0;  // per step, to and from HBM
  double compute_s = 0, memory_s = 0;
  double time_s = 0;  // max(compute_s, memory_s)
  bool compute_bound() const { return compute_s >= memory_s; }
};

struct KernelStep {
  std::vector<KernelCost> kernels;  // in the order the step runs them
  double flops = 0, bytes = 0;
  double roofline_s = 0;  // sum of the kernels' time_s
  double launches = 0;
  double launch_s = 0;      // launches x GpuRoof::launch_s
  double step_s = 0;        // roofline_s + launch_s: no overlap, nothing else on the GPU
  double tokens = 0;        // per step on this rank
  double params = 0;        // this rank's parameters (padded vocabulary), what AdamW updates
  double model_flops = 0;   // flops_per_token x tokens / tp (loom's MFU numerator)
  double mfu = 0;           // model_flops / (step_s x tensor_flops)
  double mfu_roofline = 0;  // the same without launch overhead
};

// max(flops / flops_per_s, bytes / bytes_per_s).
double roofline_seconds(double flops, double bytes, double flops_per_s, double bytes_per_s);

// Empty when the shape can be modelled; otherwise one message per problem.
std::vector<std::string> kernel_shape_errors(const KernelShape& s, const GpuRoof& g);

// Every kernel of one step (s must have no kernel_shape_errors).
KernelStep kernel_step(const KernelShape& s, const GpuRoof& g);

// The table and the totals as `loom plan --kernels` prints them.
std::string format_kernel_step(const KernelStep& k, const KernelShape& s, const GpuRoof& g,
                               const std::string& config_path);

}  // namespace loom::plan
