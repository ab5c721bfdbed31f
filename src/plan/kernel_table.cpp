// Text of `loom plan --kernels`: the kernels of one step, their roofline times and the MFU.
#include <cstdio>
#include <string>

#include "model/flops.h"
#include "plan/kernel_model.h"

namespace loom::plan {

namespace {

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string pad(std::string s, size_t width, bool right = false) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

const char* unit_name(Unit u) {
  return u == Unit::Tensor ? "tensor" : u == Unit::Attention ? "attn" : "vector";
}

}  // namespace

std::string format_kernel_step(const KernelStep& k, const KernelShape& s, const GpuRoof& g,
                               const std::string& config_path) {
  const ModelConfig& m = s.model;
  const double tokens = double(s.micro_batch) * m.seq_len * s.micro_batches;
  std::string o = "loom plan --kernels: " + config_path + "\n";
  o += "model: " + m.arch + ", " + std::to_string(m.n_layer) + " layers, d_model " +
       std::to_string(m.d_model) + ", " + std::to_string(m.n_head) + " heads of " +
       std::to_string(m.head_dim()) +
       (m.kv_heads() != m.n_head ? " (" + std::to_string(m.kv_heads()) + " kv heads)" : "") +
       ", MLP " + std::to_string(m.ffn()) + (m.llama() ? " (SwiGLU)" : " (GELU)") +
       ", vocabulary " + std::to_string(m.vocab_size) + " (" +
       std::to_string(m.padded_vocab(s.tp)) + " padded), seq_len " + std::to_string(m.seq_len) +
       "; " + fmt("%.1fM", count_params(m) / 1e6) + " parameters\n";
  o += "step: micro-batch " + std::to_string(s.micro_batch) + " x " +
       std::to_string(s.micro_batches) + " micro-batches = " + fmt("%.0f", tokens) + " tokens; " +
       (s.act_bytes == 2 ? "16-bit" : "fp32") +
       " activations and compute weights, fp32 master weights, gradients and AdamW moments\n";
  if (s.tp > 1)
    o += "one rank of tp " + std::to_string(s.tp) +
         ": GEMMs, attention heads and the vocabulary are split over tp; " +
         (m.llama() ? "RMSNorms, residual adds and copies are"
                    : "LayerNorms, residual adds, "
                      "copies and wpe are") +
         " not; the TP all-reduces are not counted here\n";
  else
    o += "one GPU (tp = pp = dp = 1)\n";
  o += "GPU: " + fmt("%.4g", g.tensor_flops / 1e12) + " TFLOP/s tensor, " +
       fmt("%.4g", g.attention(s) / 1e12) + " TFLOP/s attention matmuls, " +
       fmt("%.4g", g.vector_flops / 1e12) + " TFLOP/s vector, " + fmt("%.4g", g.bandwidth / 1e9) +
       " GB/s, " + fmt("%.3g", g.launch_s * 1e6) + " us per launch\n";
  o += "time = max(FLOPs / FLOP/s of the unit, bytes / bandwidth) per kernel, every byte moved "
       "to or from memory once\n\n";

  o += "  " + pad("kernel", 36) + pad("part", 10) + pad("calls", 7, true) + pad("GFLOP", 11, true) +
       pad("GB", 9, true) + pad("unit", 8, true) + pad("bound", 8, true) + pad("ms", 10, true) +
       pad("share", 8, true) + "\n";
  for (const KernelCost& c : k.kernels) {
    o += "  " + pad(c.name, 36) + pad(c.part, 10) + pad(fmt("%.0f", c.calls), 7, true) +
         pad(fmt("%.2f", c.flops / 1e9), 11, true) + pad(fmt("%.3f", c.bytes / 1e9), 9, true) +
         pad(unit_name(c.unit), 8, true) + pad(c.compute_bound() ? "flops" : "memory", 8, true) +
         pad(fmt("%.3f", c.time_s * 1e3), 10, true) +
         pad(fmt("%.1f%%", 100 * c.time_s / k.step_s), 8, true) + "\n";
  }
  o += "\n";
  o += "sum of kernels: " + fmt("%.3f", k.roofline_s * 1e3) + " ms (" +
       fmt("%.1f", k.flops / 1e12) + " TFLOP, " + fmt("%.2f", k.bytes / 1e9) + " GB)\n";
  o += "launch overhead: " + fmt("%.0f", k.launches) + " launches x " +
       fmt("%.3g", g.launch_s * 1e6) + " us = " + fmt("%.3f", k.launch_s * 1e3) + " ms\n";
  o += "predicted step: " + fmt("%.3f", k.step_s * 1e3) +
       " ms (the sum: kernels never overlap; no host, data or communication time)\n";
  o += "tokens/s: " + fmt("%.0f", k.tokens / k.step_s) + "\n";
  o += "model FLOPs per step: " + fmt("%.0f", flops_per_token(m)) + " per token x " +
       fmt("%.0f", k.tokens) + " tokens" + (s.tp > 1 ? " / tp" : "") + " = " +
       fmt("%.4g", k.model_flops) + " (loom's MFU numerator, src/model/flops.h)\n";
  o += "predicted MFU: " + fmt("%.1f", 100 * k.mfu) + "% (without launch overhead " +
       fmt("%.1f", 100 * k.mfu_roofline) + "%) of " + fmt("%.4g", g.tensor_flops / 1e12) +
       " TFLOP/s\n";
  return o;
}

}  // namespace loom::plan
