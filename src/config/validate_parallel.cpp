// Checks of the pipeline and context-parallel layouts: parallel.virtual_stages, parallel.cp.
#include "config/checker.h"
#include "config/config.h"

namespace loom::validation {

// Interleaved 1F1B (parallel.virtual_stages > 1): pp*v equal chunks of layers, 1f1b only,
// micro-batches in groups of pp.
void check_virtual_stages(const Config& cfg, long long dp, Checker& c) {
  const ParallelConfig& p = cfg.parallel;
  const int v = p.virtual_stages, L = cfg.model.n_layer;
  c.at_least("parallel.virtual_stages", v, 1, "set the model chunks per pipeline rank, e.g. 1");
  if (v <= 1 || p.pp < 1) return;
  if (p.pp == 1)
    c.add(str("parallel.virtual_stages: ", v,
              " needs a pipeline (parallel.pp > 1); set virtual_stages: 1 or pp >= 2"));
  if (!p.stage_layers.empty())
    c.add(str("parallel.virtual_stages: ", v, " splits the layers evenly into chunks and cannot ",
              "take parallel.stage_layers; remove stage_layers or set virtual_stages: 1"));
  if (p.schedule != "1f1b")
    c.add(str("parallel.virtual_stages: ", v, " runs interleaved 1F1B but parallel.schedule is ",
              quoted(p.schedule), "; set schedule: 1f1b or virtual_stages: 1"));
  const long long chunks = (long long)p.pp * v;
  if (L > 0 && L % chunks != 0)
    c.add(str("model.n_layer: ", L, " is not divisible by parallel.pp x parallel.virtual_stages = ",
              chunks, "; choose n_layer a multiple of ", chunks, " or change pp / virtual_stages"));
  const long long mbs = p.micro_batch_size, gb = cfg.train.global_batch_size;
  if (p.pp > 1 && dp >= 1 && mbs >= 1 && gb >= 1 && gb % (dp * mbs) == 0 &&
      (gb / (dp * mbs)) % p.pp != 0)
    c.add(str("train.global_batch_size: ", gb, " gives ", gb / (dp * mbs),
              " micro-batches per step, which interleaved 1F1B (parallel.virtual_stages: ", v,
              ") needs to be a multiple of parallel.pp=", p.pp, "; set it to ",
              nearest_multiples(gb, dp * mbs * p.pp)));
}

// Context parallelism (parallel.cp > 1): every sequence is cut into 2*cp chunks and cp rank r
// holds chunks r and 2*cp-1-r (causal load balance), so seq_len must split into 2*cp chunks.
void check_context_parallel(const Config& cfg, Checker& c) {
  const ParallelConfig& p = cfg.parallel;
  c.at_least("parallel.cp", p.cp, 1, "set the context-parallel size, e.g. 1");
  if (p.cp <= 1) return;
  const long long T = cfg.model.seq_len, chunks = 2LL * p.cp;
  if (T >= 1 && T % chunks != 0)
    c.add(
        str("model.seq_len: ", T, " is not divisible by 2 x parallel.cp = ", chunks,
            " (each context-parallel rank holds one chunk from the head and one from the tail of ",
            "every sequence); set seq_len to ", nearest_multiples(T, chunks), " or change cp"));
}

namespace {
// "1, 2, 4, 8": the divisors of n, for a suggestion.
std::string divisors_text(int n) {
  std::string out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return out;
}
}  // namespace

// Mixture of Experts with the parallel layout and device: what runs today.
void check_moe_layout(const Config& cfg, long long dp, Checker& c) {
  const ParallelConfig& p = cfg.parallel;
  c.at_least("parallel.ep", p.ep, 1, "set the expert-parallel size, e.g. 1");
  if (p.ep > 1) {
    const int E = cfg.model.moe.num_experts;
    if (!cfg.model.is_moe())
      c.add(str("parallel.ep: ", p.ep, " splits the experts of a Mixture of Experts, but ",
                "model.moe.num_experts is 0; set parallel.ep: 1"));
    else if (E % p.ep != 0)
      c.add(str("parallel.ep: ", p.ep, " does not divide model.moe.num_experts: ", E,
                " (each expert-parallel rank holds E/ep experts); choose ep from ",
                divisors_text(E)));
    if (dp >= 1 && dp % p.ep != 0)
      c.add(str("parallel.ep: ", p.ep, " does not divide the data-parallel size ", dp,
                " (the experts are split inside the data-parallel group); choose ep from ",
                divisors_text(int(dp))));
  }
  if (!cfg.model.is_moe()) return;
  if (cfg.device != "cpu" && cfg.device != "cuda")
    c.add(str("model.moe.num_experts: ", cfg.model.moe.num_experts, " needs device: cpu or cuda (",
              "the ", cfg.device, " backend has no MoE routing kernels); set device: cpu"));
  if (cfg.train.dtype != "fp32")
    c.add(str("model.moe.num_experts: ", cfg.model.moe.num_experts,
              " with train.dtype: ", cfg.train.dtype,
              " is not supported yet (the router runs in fp32); set ", "train.dtype: fp32"));
  if (cfg.train.cuda_graph)
    c.add(str("model.moe.num_experts: ", cfg.model.moe.num_experts, " with train.cuda_graph: ",
              "true cannot be captured (the host reads each layer's expert row counts); set ",
              "train.cuda_graph: false"));
  if (p.cp > 1)
    c.add(str("model.moe.num_experts: ", cfg.model.moe.num_experts, " with parallel.cp: ", p.cp,
              " is not supported yet (the capacity and the ",
              "balancing loss are per sequence); set parallel.cp: 1"));
}

}  // namespace loom::validation
