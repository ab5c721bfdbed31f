// The generation loop: per-sequence state, grouped forwards through the pipeline, sampling on
// the last stage and its broadcast, and the gathering of data-parallel results.
#include "train/generate.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "core/check.h"

namespace loom {

namespace {
constexpr int kTagRows = 71;
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::Running:
      return "running";
    case Finish::Length:
      return "length";
    case Finish::StopToken:
      return "stop_token";
    case Finish::Stopped:
      return "stop";
  }
  return "?";
}

int32_t GenSequence::at(int i) const {
  const int P = int(req.prompt.size());
  return i < P ? req.prompt[size_t(i)] : out[size_t(i - P)];
}

Generator::Generator(DecodeStage& stage, ParallelCtx& pc, int sample_vocab,
                     std::function<bool(const GenSequence&)> stop, bool use_cache)
    : stage_(stage),
      pc_(pc),
      sample_vocab_(sample_vocab),
      stop_(std::move(stop)),
      use_cache_(use_cache) {
  LOOM_CHECK(sample_vocab >= 1 && sample_vocab <= stage.layout().model().vocab_size,
             "sampling over ", sample_vocab, " ids of a vocabulary of ",
             stage.layout().model().vocab_size);
  for (int s = stage.seqs() - 1; s >= 0; --s) free_slots_.push_back(s);  // slot 0 first
}

bool Generator::add(const GenRequest& r) {
  const int T = stage_.positions();
  if (r.prompt.empty()) throw UserError(str("request ", r.id, " has an empty prompt"));
  if (r.max_tokens < 1 || int(r.prompt.size()) + r.max_tokens > T)
    throw UserError(str("request ", r.id, ": a prompt of ", r.prompt.size(), " tokens and ",
                        r.max_tokens, " new tokens do not fit the model's ", T,
                        " positions (model.seq_len): shorten the prompt or lower max tokens"));
  const std::string bad = sample_options_problem(r.sample);
  if (!bad.empty()) throw UserError(str("request ", r.id, ": ", bad));
  if (free_slots_.empty()) return false;
  GenSequence s;
  s.req = r;
  s.slot = free_slots_.back();
  free_slots_.pop_back();
  active_.push_back(std::move(s));
  return true;
}

void Generator::block_ids(std::vector<int32_t> ids) {
  for (int32_t id : ids)
    LOOM_CHECK(id >= 0 && id < sample_vocab_, "blocking id ", id, " outside the ", sample_vocab_,
               " sampled ids");
  LOOM_CHECK(int(ids.size()) < sample_vocab_, "every one of the ", sample_vocab_,
             " sampled ids is blocked");
  blocked_ = std::move(ids);
}

bool Generator::cancel(uint64_t id) {
  for (size_t i = 0; i < active_.size(); ++i) {
    if (active_[i].req.id != id) continue;
    free_slots_.push_back(active_[i].slot);
    active_.erase(active_.begin() + long(i));
    return true;
  }
  return false;
}

std::vector<GenSequence> Generator::take_finished() {
  std::vector<GenSequence> f;
  f.swap(finished_);
  return f;
}

void Generator::step() {
  // Groups of sequences in order, each as many as the stage's rows hold; every sequence's new
  // rows are the ids it has not cached (its prompt first, then its last id), or all of its ids
  // without the cache.
  std::vector<GenSequence*> group;
  int rows = 0;
  for (GenSequence& s : active_) {
    const int n = use_cache_ ? s.total() - s.cached : s.total();
    if (!group.empty() && (rows + n > stage_.max_rows() || int(group.size()) == stage_.seqs())) {
      forward_group(group);
      group.clear();
      rows = 0;
    }
    group.push_back(&s);
    rows += n;
  }
  if (!group.empty()) forward_group(group);
  // Retire finished sequences (the same on every rank: the ids are the same everywhere).
  std::vector<GenSequence> keep;
  for (GenSequence& s : active_) {
    if (s.finish == Finish::Running) {
      keep.push_back(std::move(s));
      continue;
    }
    free_slots_.push_back(s.slot);
    s.slot = -1;
    finished_.push_back(std::move(s));
  }
  active_.swap(keep);
}

void Generator::forward_group(std::vector<GenSequence*>& group) {
  const double t0 = now_s();
  std::vector<RowSpan> spans;
  std::vector<int32_t> tokens;
  bool prefill = false;
  for (GenSequence* s : group) {
    const int from = use_cache_ ? s->cached : 0;
    spans.push_back(RowSpan{s->slot, from, s->total() - from});
    for (int i = from; i < s->total(); ++i) tokens.push_back(s->at(i));
    prefill = prefill || s->out.empty();
  }
  const int R = int(tokens.size()), C = stage_.layout().model().d_model;
  const size_t NC = size_t(R) * size_t(C);
  const DType t = stage_.backend().act_dtype();
  const int pp = pc_.pp.size(), me = pc_.pp.rank();
  if (me > 0) pc_.pp.recv(stage_.input(), NC, t, me - 1, kTagRows, Ring::Next);
  std::vector<float> logits;
  stage_.forward(spans, tokens.data(), me == pp - 1 ? &logits : nullptr);
  if (me < pp - 1) {
    MPI_Request r = pc_.pp.isend(stage_.output(), NC, t, me + 1, kTagRows, Ring::Next);
    pc_.pp.wait(&r);
    pc_.pp.wait_sends();
  }
  // The last stage samples (every TP rank alike, from the same gathered logits) and tells the
  // other stages: the ids, and with logprobs each id's log-probability after them.
  const size_t G = group.size();
  std::vector<int32_t> next(logprobs ? 2 * G : G, 0);
  if (me == pp - 1) {
    const size_t Vp = logits.size() / G;
    for (size_t i = 0; i < G; ++i) {
      const GenSequence& s = *group[i];
      float* row = logits.data() + i * Vp;
      if (on_logits) on_logits(s, row, sample_vocab_);
      for (int32_t id : blocked_) row[id] = -std::numeric_limits<float>::infinity();
      const uint64_t stream = s.req.stream >= 0 ? uint64_t(s.req.stream) : s.req.id;
      next[i] = sample_token(row, sample_vocab_, s.req.sample, stream, uint64_t(s.total()));
      if (logprobs) {
        const float lp = token_logprob(row, sample_vocab_, next[i]);
        std::memcpy(&next[G + i], &lp, sizeof lp);
      }
    }
  }
  if (pp > 1) pc_.pp.broadcast(next.data(), next.size() * sizeof(int32_t), pp - 1);
  const int T = stage_.positions();
  for (size_t i = 0; i < group.size(); ++i) {
    GenSequence& s = *group[i];
    s.cached = use_cache_ ? s.total() : 0;
    s.out.push_back(next[i]);
    if (logprobs) {
      float lp = 0;
      std::memcpy(&lp, &next[G + i], sizeof lp);
      s.logprobs.push_back(lp);
    }
    if (next[i] == s.req.stop_token)
      s.finish = Finish::StopToken;
    else if (stop_ && stop_(s))
      s.finish = Finish::Stopped;
    else if (int(s.out.size()) >= s.req.max_tokens || s.total() >= T)
      s.finish = Finish::Length;
  }
  (prefill ? prefill_s : decode_s) += now_s() - t0;
  (prefill ? prefill_tokens : decode_tokens) += prefill ? R : int64_t(group.size());
}

std::vector<GenSequence> generate_all(Generator& gen, ParallelCtx& pc,
                                      const std::vector<GenRequest>& all) {
  const int dp = pc.dp.size(), me = pc.dp.rank();
  std::vector<GenRequest> mine;
  for (size_t i = 0; i < all.size(); ++i) {
    LOOM_CHECK(all[i].id == i, "request ", i, " carries id ", all[i].id);
    if (int(i % size_t(dp)) == me) mine.push_back(all[i]);
  }
  std::vector<GenSequence> done;
  size_t next = 0;
  while (next < mine.size() || !gen.idle()) {
    while (next < mine.size() && gen.add(mine[next])) ++next;
    gen.step();
    for (GenSequence& s : gen.take_finished()) done.push_back(std::move(s));
  }
  // Every rank of a replica holds its sequences; its (pp 0, tp 0) rank sends them over dp to
  // dp rank 0 there, which is world rank 0: [id, finish, n, ids...] per sequence.
  if (pc.coord.pp != 0 || pc.coord.tp != 0) return {};
  std::vector<int32_t> mine_wire;
  for (const GenSequence& s : done) {
    mine_wire.push_back(int32_t(s.req.id));
    mine_wire.push_back(int32_t(s.finish));
    mine_wire.push_back(int32_t(s.out.size()));
    mine_wire.insert(mine_wire.end(), s.out.begin(), s.out.end());
  }
  int n = int(mine_wire.size());
  std::vector<int> counts(size_t(dp), 0), displs(size_t(dp), 0);
  LOOM_MPI(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, pc.dp.mpi()));
  for (size_t r = 1; r < counts.size(); ++r) displs[r] = displs[r - 1] + counts[r - 1];
  std::vector<int32_t> wire(size_t(displs.back() + counts.back()));
  LOOM_MPI(MPI_Gatherv(mine_wire.data(), n, MPI_INT32_T, wire.data(), counts.data(), displs.data(),
                       MPI_INT32_T, 0, pc.dp.mpi()));
  if (pc.rank != 0) return {};
  std::vector<GenSequence> out(all.size());
  for (size_t i = 0; i + 3 <= wire.size();) {
    const size_t id = size_t(wire[i]), len = size_t(wire[i + 2]);
    LOOM_CHECK(id < out.size() && i + 3 + len <= wire.size(), "gathered sequence ", id);
    GenSequence& s = out[id];
    s.req = all[id];
    s.finish = Finish(wire[i + 1]);
    s.out.assign(wire.begin() + long(i + 3), wire.begin() + long(i + 3 + len));
    i += 3 + len;
  }
  return out;
}

}  // namespace loom
