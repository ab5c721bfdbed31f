// Rank 0's meeting point of the HTTP threads and the generation loop: requests queue here, the
// loop takes as many sequences as the replicas have free cache slots between decode steps
// (continuous batching), and publishes every sequence's new ids back to the request waiting for
// them.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serve/completions_api.h"
#include "train/generate.h"

namespace loom::serve {

// One prompt of a request, as far as the loop has run it.
struct SeqProgress {
  std::vector<int32_t> prompt;
  std::vector<int32_t> out;     // generated ids
  std::vector<float> logprobs;  // one per generated id
  Finish finish = Finish::Running;
};

// One HTTP request: its parameters, its prompts' progress, and whether its client left.
struct Job {
  CompletionParams params;
  uint64_t seed = 0;  // params.seed, or the server's pick
  std::vector<SeqProgress> seqs;
  int finished = 0;  // sequences done
  bool cancelled = false;
  bool done() const { return finished == int(seqs.size()); }
};

// A sequence the loop adds, as every rank receives it.
struct NewSequence {
  uint64_t id = 0;
  int replica = 0;  // the data-parallel replica that runs it
  std::vector<int32_t> prompt;
  int max_tokens = 0;
  SampleOptions sample;
  int64_t stream = 0;  // the prompt's index in its request: same request, same seed, same text
  std::vector<std::string> stop;
};

// What rank 0 decided between two decode steps; broadcast to every rank.
struct Tick {
  std::vector<NewSequence> add;
  std::vector<uint64_t> cancel;
  bool step = false;  // some sequence is running: every replica steps (or waits) and reports
  bool quit = false;
  std::string to_wire() const;
  static Tick from_wire(const std::string& wire);
};

// What one decode step gave a sequence: its new id and that id's logprob; count is its number
// of generated ids since (a check that no step is lost); finish once it is done.
struct SeqUpdate {
  uint64_t id = 0;
  int32_t token = 0;
  float logprob = 0;
  int32_t count = 0;
  Finish finish = Finish::Running;
};

class Board {
 public:
  // replicas: data-parallel model replicas; slots: cache slots of each.
  Board(int replicas, int slots);

  // HTTP threads. submit: false when the server is draining (stopping). cancel: the client
  // went away; its queued prompts are dropped and its running ones cancelled at the next tick.
  bool submit(const std::shared_ptr<Job>& job);
  void cancel(const std::shared_ptr<Job>& job);
  // Waits until the job changed (new ids, a finish) or timeout_ms passed; returns a copy of
  // its progress taken under the lock.
  std::vector<SeqProgress> wait(const std::shared_ptr<Job>& job, int64_t seen_version,
                                int timeout_ms, int64_t* version, bool* done);

  // The loop (rank 0's main thread). next_tick: the pending cancels, and queued prompts for the
  // free slots, each to the replica with the most free slots; when nothing runs and nothing is
  // pending it first waits up to wait_ms for a submit, a cancel or a drain.
  Tick next_tick(int wait_ms);
  void publish(const std::vector<SeqUpdate>& updates);
  void drain();
  bool draining() const;
  bool empty() const;  // nothing queued and nothing running

 private:
  struct Ref {
    std::shared_ptr<Job> job;
    int index = 0;
    int replica = 0;
  };

  mutable std::mutex m_;
  std::condition_variable work_;     // wakes the loop
  std::condition_variable changed_;  // wakes the HTTP threads
  std::deque<Ref> queue_;            // prompts not yet in the generator
  std::map<uint64_t, Ref> running_;  // sequence id -> its prompt
  std::vector<uint64_t> cancels_;
  std::vector<int> busy_;  // running sequences per replica
  int slots_ = 0;
  uint64_t next_id_ = 0;
  int64_t version_ = 0;  // bumped by every publish
  bool draining_ = false;
};

}  // namespace loom::serve
