// The request board: queueing, admission into free cache slots, cancels and progress.
#include "serve/board.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "core/check.h"

namespace loom::serve {

using json = nlohmann::json;

std::string Tick::to_wire() const {
  json a = json::array();
  for (const NewSequence& s : add)
    a.push_back(json{{"id", s.id},
                     {"replica", s.replica},
                     {"prompt", s.prompt},
                     {"max_tokens", s.max_tokens},
                     {"temperature", s.sample.temperature},
                     {"top_k", s.sample.top_k},
                     {"top_p", s.sample.top_p},
                     {"seed", s.sample.seed},
                     {"stream", s.stream},
                     {"stop", s.stop}});
  return json{{"add", a}, {"cancel", cancel}, {"step", step}, {"quit", quit}}.dump();
}

Tick Tick::from_wire(const std::string& wire) {
  const json j = json::parse(wire);
  Tick t;
  for (const json& a : j.at("add")) {
    NewSequence s;
    s.id = a.at("id").get<uint64_t>();
    s.replica = a.at("replica").get<int>();
    s.prompt = a.at("prompt").get<std::vector<int32_t>>();
    s.max_tokens = a.at("max_tokens").get<int>();
    s.sample.temperature = a.at("temperature").get<float>();
    s.sample.top_k = a.at("top_k").get<int>();
    s.sample.top_p = a.at("top_p").get<float>();
    s.sample.seed = a.at("seed").get<uint64_t>();
    s.stream = a.at("stream").get<int64_t>();
    s.stop = a.at("stop").get<std::vector<std::string>>();
    t.add.push_back(std::move(s));
  }
  t.cancel = j.at("cancel").get<std::vector<uint64_t>>();
  t.step = j.at("step").get<bool>();
  t.quit = j.at("quit").get<bool>();
  return t;
}

Board::Board(int replicas, int slots) : busy_(size_t(replicas), 0), slots_(slots) {
  LOOM_CHECK(replicas >= 1 && slots >= 1, "a board of ", replicas, " replicas of ", slots,
             " slots");
}

bool Board::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (draining_) return false;
    for (int i = 0; i < int(job->seqs.size()); ++i) queue_.push_back(Ref{job, i});
  }
  work_.notify_all();
  return true;
}

void Board::cancel(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (job->cancelled || job->done()) return;
    job->cancelled = true;
    for (auto it = queue_.begin(); it != queue_.end();)
      it = it->job == job ? queue_.erase(it) : it + 1;
    for (const auto& [id, ref] : running_)
      if (ref.job == job) cancels_.push_back(id);
  }
  work_.notify_all();
}

std::vector<SeqProgress> Board::wait(const std::shared_ptr<Job>& job, int64_t seen_version,
                                     int timeout_ms, int64_t* version, bool* done) {
  std::unique_lock<std::mutex> lock(m_);
  changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                    [&] { return version_ != seen_version || job->done(); });
  *version = version_;
  *done = job->done();
  return job->seqs;
}

Tick Board::next_tick(int wait_ms) {
  std::unique_lock<std::mutex> lock(m_);
  if (running_.empty())
    work_.wait_for(lock, std::chrono::milliseconds(wait_ms),
                   [&] { return !queue_.empty() || !cancels_.empty() || draining_; });
  Tick t;
  for (uint64_t id : cancels_) {
    auto it = running_.find(id);
    if (it == running_.end()) continue;
    --busy_[size_t(it->second.replica)];
    running_.erase(it);
  }
  t.cancel.swap(cancels_);
  while (!queue_.empty()) {
    const int r = int(std::min_element(busy_.begin(), busy_.end()) - busy_.begin());
    if (busy_[size_t(r)] >= slots_) break;
    Ref ref = queue_.front();
    queue_.pop_front();
    ref.replica = r;
    ++busy_[size_t(r)];
    const Job& j = *ref.job;
    NewSequence s;
    s.id = next_id_++;
    s.replica = r;
    s.prompt = j.seqs[size_t(ref.index)].prompt;
    s.max_tokens = j.params.max_tokens;
    s.sample = j.params.sample;
    s.sample.seed = j.seed;
    s.stream = ref.index;
    s.stop = j.params.stop;
    running_[s.id] = ref;
    t.add.push_back(std::move(s));
  }
  t.step = !running_.empty();
  return t;
}

void Board::publish(const std::vector<SeqUpdate>& updates) {
  {
    std::lock_guard<std::mutex> lock(m_);
    for (const SeqUpdate& u : updates) {
      auto it = running_.find(u.id);
      if (it == running_.end()) continue;  // cancelled meanwhile
      Job& j = *it->second.job;
      SeqProgress& p = j.seqs[size_t(it->second.index)];
      LOOM_CHECK(int(p.out.size()) + 1 == u.count, "serve: sequence ", u.id, " reports id ",
                 u.count, " after ", p.out.size());
      p.out.push_back(u.token);
      p.logprobs.push_back(u.logprob);
      if (u.finish == Finish::Running) continue;
      p.finish = u.finish;
      ++j.finished;
      --busy_[size_t(it->second.replica)];
      running_.erase(it);
    }
    ++version_;
  }
  changed_.notify_all();
}

void Board::drain() {
  {
    std::lock_guard<std::mutex> lock(m_);
    draining_ = true;
  }
  work_.notify_all();
}

bool Board::draining() const {
  std::lock_guard<std::mutex> lock(m_);
  return draining_;
}

bool Board::empty() const {
  std::lock_guard<std::mutex> lock(m_);
  return queue_.empty() && running_.empty() && cancels_.empty();
}

}  // namespace loom::serve
