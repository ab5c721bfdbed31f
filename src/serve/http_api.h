// loom serve's HTTP side on rank 0 (cpp-httplib): POST /v1/completions, GET /v1/models and
// GET /health. Handlers run on the server's thread pool and never call MPI: they tokenize,
// queue a Job on the Board and answer from its progress, whole or as server-sent events.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "data_tools/tokenizer.h"
#include "serve/board.h"

namespace httplib {
class Server;
}

namespace loom::serve {

struct ServeInfo {
  std::string model_id;  // the run's name
  int context = 0;       // model.seq_len
  int model_vocab = 0;   // model.vocab_size: a prompt id at or above it has no embedding
  int32_t eod = -1;      // the tokenizer's end-of-document id
  int sample_vocab = 0;  // ids sampling may pick (for the token texts of logprobs)
  int64_t created = 0;   // unix time the server started (the model's "created")
};

// A finished or running prompt as the API shows it: its text (end-of-document id dropped, cut
// before the first stop string), each token's text, logprob and offset in the text (tokens
// that start inside it), and the finish reason ("stop", "length"; nullptr while running).
struct Rendered {
  std::string text;
  std::vector<std::string> tokens;
  std::vector<float> logprobs;
  std::vector<int64_t> offsets;
  const char* finish = nullptr;
};
Rendered render(const tok::Tokenizer& tk, const SeqProgress& p,
                const std::vector<std::string>& stops);

class HttpFrontEnd {
 public:
  HttpFrontEnd(Board& board, const tok::Tokenizer& tk, ServeInfo info, int threads);
  ~HttpFrontEnd();
  // Binds host:port (port 0: a free port) and serves on a thread of its own; throws UserError
  // naming the address when it cannot bind. Returns the port.
  int start(const std::string& host, int port);
  // Stops listening and waits for the handlers to return.
  void stop();

 private:
  Board& board_;
  std::atomic<int> streams_{0};  // streamed responses not yet finished (stop waits for them)
  uint64_t seed_base_ = 0;       // drawn at start: the seeds of requests that give none
  const tok::Tokenizer& tk_;
  ServeInfo info_;
  std::unique_ptr<httplib::Server> svr_;
  std::thread listener_;
};

}  // namespace loom::serve
