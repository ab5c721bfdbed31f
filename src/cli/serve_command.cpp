// loom serve: an OpenAI-compatible completions server over any (pp, tp) layout. Rank 0 answers
// HTTP; every rank runs the same decode steps, following rank 0's decisions.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <ctime>

#include "cli/commands.h"
#include "cli/decode_setup.h"
#include "core/check.h"
#include "core/log.h"
#include "parallel/collective.h"
#include "serve/http_api.h"
#include "serve/serve_loop.h"
#include "train/signals.h"

namespace loom::cli {

int cmd_serve(const Args& a, Phase& phase) {
  const int world = world_size();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string ckpt = option(a, "--checkpoint", "");
  if (ckpt.empty() || !a.operands.empty())
    throw UserError("loom serve needs --checkpoint DIR (see loom --help)");
  const std::string host = option(a, "--host", "127.0.0.1");
  const int port = option_int(a, "--port", 8000);
  if (port < 0 || port > 65535)
    throw UserError(str("loom serve: --port ", port, " must be in 0..65535 (0: any free port)"));
  const int batch = option_int(a, "--batch", 16);
  if (batch < 1) throw UserError(str("loom serve: --batch ", batch, " must be >= 1"));
  const DecodeCheckpoint ck = open_decode_checkpoint("serve", ckpt, a.overrides, world);
  const Config& c = ck.config;
  Decoder d = make_decoder(ck, batch, /*use_cache=*/true);
  ParallelCtx& pc = *d.pc;
  const tok::Tokenizer& tk = *ck.tokenizer;
  auto stop = [&tk](const GenSequence& s) { return serve::hits_stop(tk, s, s.req.stop); };
  Generator gen(*d.stage, pc, sample_vocab(ck), stop, /*use_cache=*/true);
  gen.logprobs = true;
  gen.block_ids(undecodable_ids(ck));

  std::unique_ptr<serve::Board> board;
  std::unique_ptr<serve::HttpFrontEnd> http;
  collectively([&] {
    if (rank != 0) return;
    signal(SIGPIPE, SIG_IGN);  // a client that hangs up fails a write, not the process
    board = std::make_unique<serve::Board>(c.parallel.dp, batch);
    serve::ServeInfo info;
    info.model_id = c.run.name;
    info.context = c.model.seq_len;
    info.model_vocab = c.model.vocab_size;
    info.eod = tk.eod();
    info.sample_vocab = sample_vocab(ck);
    info.created = int64_t(std::time(nullptr));
    http = std::make_unique<serve::HttpFrontEnd>(*board, tk, info,
                                                 std::max(32, 4 * batch * c.parallel.dp));
    const int bound = http->start(host, port);
    std::fprintf(stderr,
                 "loom serve: model '%s' (%s) on dp=%d pp=%d tp=%d, %d sequences at a time per "
                 "replica, KV cache %.1f MiB per rank\nloom serve: listening on http://%s:%d "
                 "(POST /v1/completions, GET /v1/models, GET /health)\n",
                 c.run.name.c_str(), ck.dir.c_str(), c.parallel.dp, c.parallel.pp, c.parallel.tp,
                 batch, double(d.stage->cache_bytes()) / double(1 << 20), host.c_str(), bound);
    std::fflush(stderr);
  });
  phase = Phase::Running;
  serve::LoopStats st;
  try {
    st = serve::run_serve_loop(gen, pc, board.get(), tk.eod(), [] { return stop_signal() != 0; });
  } catch (const std::exception& e) {
    // End the job from here: unwinding would first stop the HTTP server, which waits for
    // handlers that wait for answers this loop will never give.
    std::fprintf(stderr, "%serror: %s\n", log_prefix().c_str(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0) {
    http->stop();
    std::fprintf(stderr,
                 "loom serve: stopped after %lld sequences (%lld cancelled by their clients), "
                 "%lld decode steps; replica 0: prefill %lld tokens in %.2f s, decode %lld "
                 "tokens in %.2f s\n",
                 (long long)st.sequences, (long long)st.cancelled, (long long)st.steps,
                 (long long)gen.prefill_tokens, gen.prefill_s, (long long)gen.decode_tokens,
                 gen.decode_s);
  }
  return 0;
}

}  // namespace loom::cli
