// The environment of elastic restarts: the restart event, the rank-kill fault, the sample trace.
#include "train/elastic_hooks.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/check.h"
#include "layout/stage_memory.h"

namespace loom {

namespace {

struct ElasticEnv {
  int kill_rank = -1, kill_step = -1;  // LOOM_FAULT_KILL_RANK
  int attempt = 0;                     // LOOM_ELASTIC_ATTEMPT
  std::string trace_path;              // LOOM_TRACE_SAMPLES
  std::unique_ptr<FILE, int (*)(FILE*)> trace{nullptr, &std::fclose};
};

// A whole number >= 0 from text, or -1.
long long whole(const std::string& s) {
  if (s.empty() || s.size() > 12 || s.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoll(s);
}

ElasticEnv read_env() {
  ElasticEnv e;
  if (const char* f = std::getenv("LOOM_FAULT_KILL_RANK")) {
    const std::string v = f;
    const size_t colon = v.find(':');
    const long long r = colon == std::string::npos ? -1 : whole(v.substr(0, colon));
    const long long s = colon == std::string::npos ? -1 : whole(v.substr(colon + 1));
    if (r < 0 || s < 1 || r > 1000000000 || s > 1000000000)
      throw UserError(str("LOOM_FAULT_KILL_RANK='", v,
                          "': expected RANK:STEP (a world rank >= 0 and a step >= 1), e.g. 5:7"));
    e.kill_rank = int(r), e.kill_step = int(s);
  }
  if (const char* a = std::getenv("LOOM_ELASTIC_ATTEMPT")) {
    const long long n = whole(a);
    if (n < 0 || n > 1000000)
      throw UserError(str("LOOM_ELASTIC_ATTEMPT='", a, "': expected a whole number >= 0"));
    e.attempt = int(n);
  }
  if (const char* p = std::getenv("LOOM_TRACE_SAMPLES")) {
    e.trace_path = p;
    e.trace.reset(std::fopen(p, "a"));  // append: every rank and every attempt adds lines
    if (!e.trace) throw UserError(str("LOOM_TRACE_SAMPLES='", p, "': cannot open for appending"));
  }
  return e;
}

ElasticEnv& env() {
  static ElasticEnv e = read_env();
  return e;
}

}  // namespace

void check_elastic_env() { env(); }

void fault_kill_rank(int rank, int step) {
  const ElasticEnv& e = env();
  if (rank == e.kill_rank && step == e.kill_step) std::raise(SIGKILL);
}

void trace_samples(int step, int rank, int dp_rank, int64_t first, int rows) {
  ElasticEnv& e = env();
  if (!e.trace) return;
  // One write per line (append mode): lines of concurrent ranks do not interleave.
  std::fprintf(e.trace.get(), "attempt %d step %d rank %d dp %d first %lld rows %d\n", e.attempt,
               step, rank, dp_rank, static_cast<long long>(first), rows);
  std::fflush(e.trace.get());
}

nlohmann::ordered_json restart_event(const RunLayout& run, int world, int step) {
  const ElasticEnv& e = env();
  if (e.attempt < 1) return nullptr;
  nlohmann::ordered_json j;
  j["event"] = "restart";
  j["attempt"] = e.attempt;
  const char* reason = std::getenv("LOOM_ELASTIC_REASON");
  j["reason"] = reason ? reason : "";
  const char* hosts = std::getenv("LOOM_ELASTIC_HOSTS");
  j["hosts"] = hosts ? hosts : "";
  j["ranks"] = world;
  nlohmann::ordered_json l;
  l["dp"] = run.dp(), l["pp"] = run.pp(), l["tp"] = run.tp(), l["cp"] = run.cp();
  l["virtual_stages"] = run.virtual_stages();
  l["micro_batch_size"] = run.micro_batch();
  l["microbatches"] = run.microbatches();  // gradient accumulation per step on each dp rank
  l["zero_stage"] = run.zero_stage();
  l["recompute"] = recompute_name(run.recompute());
  l["sequence_parallel"] = run.sequence_parallel();
  j["layout"] = l;
  j["step"] = step;
  return j;
}

}  // namespace loom
