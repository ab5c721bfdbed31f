// Generation over a DecodeStage on any layout: a batch of sequences with per-sequence state,
// and a step that advances every active sequence by one token (a new sequence's first step runs
// its whole prompt: prefill). Every rank of one model replica (its pp x tp ranks) runs the same
// calls in the same order; the last stage samples and broadcasts the ids to the other stages,
// so every rank holds every sequence's tokens. A server adds requests between steps.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/decode_stage.h"
#include "train/sampling.h"

namespace loom {

struct GenRequest {
  uint64_t id = 0;              // the sequence's number (its input order), unique in a Generator
  int64_t stream = -1;          // its sampling stream with sample.seed; -1: the id
  std::vector<int32_t> prompt;  // 1..seq_len ids
  int max_tokens = 64;          // prompt + max_tokens <= seq_len (checked by add)
  SampleOptions sample;
  int32_t stop_token = -1;        // finish after producing this id (EOD); -1: never
  std::vector<std::string> stop;  // stop strings, for the caller's stop test (Generator's stop)
};

enum class Finish { Running, Length, StopToken, Stopped };  // Stopped: the caller's stop test
const char* finish_name(Finish f);                          // "length", "stop", ...

struct GenSequence {
  GenRequest req;
  std::vector<int32_t> out;  // generated ids
  // With Generator::logprobs: the log-probability of each generated id under the model (log
  // softmax of its row of logits over the sampled vocabulary, at temperature 1).
  std::vector<float> logprobs;
  int slot = -1;   // cache slot while active
  int cached = 0;  // ids of prompt + out whose keys and values are in the cache
  Finish finish = Finish::Running;
  int total() const { return int(req.prompt.size() + out.size()); }
  int32_t at(int i) const;  // id i of prompt + out
};

class Generator {
 public:
  // sample_vocab: ids the tokenizer can decode (<= vocab_size); stop(seq): the caller's stop
  // test after each new id (stop strings), the same on every rank. use_cache false: every step
  // recomputes each sequence's whole prefix (for comparison and benchmarks).
  Generator(DecodeStage& stage, ParallelCtx& pc, int sample_vocab,
            std::function<bool(const GenSequence&)> stop = {}, bool use_cache = true);

  // Takes a request when a cache slot is free (false otherwise). Throws UserError when the
  // prompt is empty or prompt + max_tokens exceeds the model's positions.
  bool add(const GenRequest& r);
  // One forward per group of sequences whose new rows fit the stage: each active sequence gets
  // one more id (or its first after the prompt). Collective over the replica.
  void step();
  bool idle() const { return active_.empty(); }
  int free_slots() const { return int(free_slots_.size()); }
  // Ids below the sampled vocabulary that are never sampled (their logits count as -inf): those
  // the tokenizer cannot decode (unused ranks of a tiktoken file or tokenizer.json).
  void block_ids(std::vector<int32_t> ids);
  const std::vector<GenSequence>& active() const { return active_; }
  // Drops the active sequence with this id and frees its slot (a client that went away); false
  // when no active sequence has it. Every rank of the replica must drop the same ones.
  bool cancel(uint64_t id);
  // Finished sequences since the last call, in the order they finished.
  std::vector<GenSequence> take_finished();

  // Last stage only: called with each sampled row of logits (the sampled vocabulary).
  std::function<void(const GenSequence&, const float* logits, int V)> on_logits;
  // Seconds spent in forwards that held prompt rows (prefill) and in one-row forwards (decode).
  double prefill_s = 0, decode_s = 0;
  bool logprobs = false;  // fill GenSequence::logprobs (the last stage sends them with the ids)
  int64_t prefill_tokens = 0, decode_tokens = 0;

 private:
  void forward_group(std::vector<GenSequence*>& group);

  DecodeStage& stage_;
  ParallelCtx& pc_;
  int sample_vocab_;
  std::function<bool(const GenSequence&)> stop_;
  bool use_cache_;
  std::vector<int> free_slots_;
  std::vector<int32_t> blocked_;
  std::vector<GenSequence> active_, finished_;
};

// Runs every request of this data-parallel rank's share (request i on dp rank i % dp) to the
// end and returns, on world rank 0, every sequence in input order (elsewhere: empty).
// Collective over the world.
std::vector<GenSequence> generate_all(Generator& gen, ParallelCtx& pc,
                                      const std::vector<GenRequest>& all);

}  // namespace loom
