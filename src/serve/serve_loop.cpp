// The tick broadcast and the decode steps of loom serve.
#include "serve/serve_loop.h"

#include <mpi.h>
#include <unistd.h>

#include <cstring>

#include "core/check.h"
#include "core/process.h"
#include "serve/completion_text.h"

namespace loom::serve {

namespace {
// Rank 0's tick to every rank. The other ranks wait for it without spinning: an idle server
// would otherwise keep every core busy in MPI's polling.
std::string broadcast_tick(const std::string& wire, MPI_Comm world) {
  int rank = 0;
  LOOM_MPI(MPI_Comm_rank(world, &rank));
  uint64_t len = wire.size();
  MPI_Request r;
  LOOM_MPI(MPI_Ibcast(&len, 1, MPI_UINT64_T, 0, world, &r));
  for (int done = 0;;) {
    LOOM_MPI(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
    if (done) break;
    usleep(200);
  }
  std::string out = rank == 0 ? wire : std::string(len, '\0');
  LOOM_MPI(MPI_Bcast(out.data(), int(len), MPI_CHAR, 0, world));
  return out;
}

// A test hook: LOOM_TEST_DECODE_SLEEP_MS slows every decode step, so that a test can hang up
// or stop the server while a request is still running, on a machine of any speed.
const TestDelay test_decode_delay("LOOM_TEST_DECODE_SLEEP_MS");
}  // namespace

bool hits_stop(const tok::Tokenizer& tk, const GenSequence& s,
               const std::vector<std::string>& stops) {
  if (stops.empty()) return false;
  size_t n = s.out.size();
  if (n > 0 && s.out[n - 1] == s.req.stop_token) --n;
  return stop_at(tk.decode(s.out.data(), n), stops) != std::string::npos;
}

std::vector<SeqUpdate> step_updates(const std::vector<GenSequence>& active,
                                    const std::vector<GenSequence>& finished) {
  std::vector<SeqUpdate> u;
  for (const auto* list : {&active, &finished})
    for (const GenSequence& s : *list) {
      LOOM_CHECK(!s.out.empty() && s.logprobs.size() == s.out.size(), "serve: sequence ", s.req.id,
                 " has ", s.out.size(), " ids and ", s.logprobs.size(), " logprobs");
      u.push_back(
          SeqUpdate{s.req.id, s.out.back(), s.logprobs.back(), int32_t(s.out.size()), s.finish});
    }
  return u;
}

std::vector<SeqUpdate> gather_updates(const std::vector<SeqUpdate>& mine, ParallelCtx& pc) {
  if (pc.coord.pp != 0 || pc.coord.tp != 0) return {};
  // 6 int32 per update: id (low, high), token, logprob's bits, count, finish.
  std::vector<int32_t> wire;
  for (const SeqUpdate& u : mine) {
    int32_t lp = 0;
    std::memcpy(&lp, &u.logprob, sizeof lp);
    wire.insert(wire.end(), {int32_t(u.id & 0xFFFFFFFFu), int32_t(u.id >> 32), u.token, lp, u.count,
                             int32_t(u.finish)});
  }
  const int dp = pc.dp.size();
  int n = int(wire.size());
  std::vector<int> counts(size_t(dp), 0), displs(size_t(dp), 0);
  LOOM_MPI(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, pc.dp.mpi()));
  for (size_t r = 1; r < counts.size(); ++r) displs[r] = displs[r - 1] + counts[r - 1];
  std::vector<int32_t> all(pc.dp.rank() == 0 ? size_t(displs.back() + counts.back()) : 0);
  LOOM_MPI(MPI_Gatherv(wire.data(), n, MPI_INT32_T, all.data(), counts.data(), displs.data(),
                       MPI_INT32_T, 0, pc.dp.mpi()));
  std::vector<SeqUpdate> out;
  for (size_t i = 0; i + 6 <= all.size(); i += 6) {
    SeqUpdate u;
    u.id = uint64_t(uint32_t(all[i])) | (uint64_t(uint32_t(all[i + 1])) << 32);
    u.token = all[i + 2];
    std::memcpy(&u.logprob, &all[i + 3], sizeof u.logprob);
    u.count = all[i + 4];
    u.finish = Finish(all[i + 5]);
    out.push_back(u);
  }
  return out;
}

LoopStats run_serve_loop(Generator& gen, ParallelCtx& pc, Board* board, int32_t stop_token,
                         const std::function<bool()>& stop_requested) {
  LoopStats st;
  const int replica = pc.coord.dp;
  for (;;) {
    std::string wire;
    if (board) {
      if (!board->draining() && stop_requested()) board->drain();
      Tick t = board->next_tick(100);
      t.quit = board->draining() && !t.step && board->empty();
      wire = t.to_wire();
    }
    const Tick t = Tick::from_wire(broadcast_tick(wire, pc.world.mpi()));
    ++st.ticks;
    // Every id rank 0 cancels runs on some replica; each replica drops its own.
    st.cancelled += int64_t(t.cancel.size());
    st.sequences += int64_t(t.add.size());
    for (uint64_t id : t.cancel) gen.cancel(id);
    for (const NewSequence& s : t.add) {
      if (s.replica != replica) continue;
      GenRequest r;
      r.id = s.id;
      r.stream = s.stream;
      r.prompt = s.prompt;
      r.max_tokens = s.max_tokens;
      r.sample = s.sample;
      r.stop_token = stop_token;
      r.stop = s.stop;
      LOOM_CHECK(gen.add(r), "serve: rank 0 gave sequence ", s.id, " to replica ", replica,
                 ", which has no free slot");
    }
    if (t.quit) break;
    if (!t.step) continue;
    std::vector<GenSequence> finished;
    if (!gen.idle()) {
      gen.step();
      test_decode_delay();
      ++st.steps;
      finished = gen.take_finished();
    }
    const std::vector<SeqUpdate> all = gather_updates(step_updates(gen.active(), finished), pc);
    if (board) board->publish(all);
  }
  return st;
}

}  // namespace loom::serve
