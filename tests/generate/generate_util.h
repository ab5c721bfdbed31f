// Support for the generation tests: tiny GPT-2 and Llama (GQA) models, a run of the cached
// generator on any layout with every sampled row of logits recorded, and the full-recompute
// reference of the training forward (GPTStage).
#pragma once
#include <cmath>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "model/decode_stage.h"
#include "model/gpt_stage.h"
#include "model/init.h"
#include "train/generate.h"

namespace loom::test {

inline ModelConfig tiny_gpt2() {
  ModelConfig m;
  m.n_layer = 2, m.n_head = 4, m.d_model = 32, m.vocab_size = 97, m.seq_len = 16;
  return m;
}

// Llama with grouped-query attention: 4 query heads share 2 kv heads.
inline ModelConfig tiny_llama() {
  ModelConfig m = tiny_gpt2();
  m.arch = "llama", m.n_kv_head = 2, m.ffn_hidden = 64;
  return m;
}

constexpr uint64_t kInitSeed = 7;

// Prompts of 1, 3, 6 and 2 ids (deterministic), each asking for max_tokens.
inline std::vector<GenRequest> test_requests(int vocab, int max_tokens, SampleOptions s) {
  const std::vector<int> lens = {1, 3, 6, 2};
  std::vector<GenRequest> r;
  for (size_t i = 0; i < lens.size(); ++i) {
    GenRequest q;
    q.id = i;
    for (int t = 0; t < lens[i]; ++t) q.prompt.push_back(int32_t((17 * i + 5 * t + 3) % vocab));
    q.max_tokens = max_tokens;
    q.sample = s;
    r.push_back(q);
  }
  return r;
}

using LogitRows = std::map<std::pair<uint64_t, int>, std::vector<float>>;  // (id, position)

struct GenRun {
  LogitRows rows;                   // last-stage ranks: every sampled row of their sequences
  std::vector<GenSequence> result;  // rank 0 of the run: every sequence in input order
};

// The cached generator on the grid of pc (coords give this rank's shard), parameters from
// init_params (the same canonical values on every layout).
inline GenRun run_generator(const ModelConfig& m, ParallelCtx& pc, Backend& be,
                            const std::vector<GenRequest>& reqs, int slots, bool use_cache) {
  const ParamLayout layout(m, pc.grid.size(Axis::TP), pc.coord.tp, pc.grid.size(Axis::PP),
                           pc.coord.pp);
  std::vector<float> host(layout.total());
  init_params(layout, m, kInitSeed, host.data());
  DecodeStage stage(m, layout, pc, be, slots, use_cache ? m.seq_len : slots * m.seq_len);
  stage.set_params(host.data());
  GenRun run;
  Generator gen(stage, pc, m.vocab_size, {}, use_cache);
  gen.on_logits = [&](const GenSequence& s, const float* row, int V) {
    run.rows[{s.req.id, s.total() - 1}] = std::vector<float>(row, row + V);
  };
  run.result = generate_all(gen, pc, reqs);
  return run;
}

// Logits (T, V) of the training forward over ids (padded to seq_len; causal, so the padding
// does not reach earlier rows), one rank.
inline std::vector<float> full_forward_logits(const ModelConfig& m,
                                              const std::vector<int32_t>& ids) {
  auto pc = make_parallel_ctx(Grid(1, 1, 1), MPI_COMM_SELF);
  const RunLayout run = RunLayout::single_sequence(m);
  const auto be = make_cpu_backend();
  GPTStage st(run, run.memory(be->traits()), *pc, *be);
  init_params(run.params(), m, kInitSeed, st.params());
  std::vector<int32_t> window(size_t(m.seq_len), 0);
  std::copy(ids.begin(), ids.end(), window.begin());
  Buffer dtok(window.size() * sizeof(int32_t), be->device());
  be->from_host(dtok.data(), window.data(), window.size() * sizeof(int32_t));
  st.forward(0, static_cast<const int32_t*>(dtok.data()), nullptr, 0.0f);
  const int Vl = run.params().vocab_local();
  std::vector<float> all(size_t(m.seq_len) * size_t(Vl)), out;
  st.logits_to_host(all.data());
  for (int t = 0; t < m.seq_len; ++t)
    out.insert(out.end(), all.begin() + long(t) * Vl, all.begin() + long(t) * Vl + m.vocab_size);
  return out;
}

// Cached and reference logits differ only by the order of fp32 sums: the cached path attends
// to the cache in one block of an online softmax (the full forward's kernel normalizes after a
// full pass) and runs its GEMMs over other row counts, so BLAS may split the sums differently.
// Along a logit's chain (per layer: qkv 32, attention <= 16, projection 32, MLP 32 + 128 terms;
// 2 layers; the head's 32) about n = 512 terms are summed, each level off by at most n*u of its
// magnitude sum: 512 * 2^-24 = 3.1e-5. Bound: 1e-4 of the row's largest |logit|, 3x that.
constexpr double kCachedVsFull = 1e-4;

inline double row_error(const std::vector<float>& got, const float* ref, int V) {
  double worst = 0, scale = 0;
  for (int v = 0; v < V; ++v) {
    worst = std::max(worst, std::fabs(double(got[size_t(v)]) - double(ref[v])));
    scale = std::max(scale, std::fabs(double(ref[v])));
  }
  return worst / scale;
}

}  // namespace loom::test
