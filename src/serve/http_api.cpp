// The endpoints of loom serve: request checks, tokenization, whole and streamed answers.
#include "serve/http_api.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <random>

#include "core/check.h"
#include "serve/completion_text.h"

namespace loom::serve {

using json = nlohmann::json;

namespace {
std::atomic<uint64_t> g_request_number{0};

void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  send_json(res, e.status, error_json(e));
}

ApiError server_error(int status, const std::string& message) {
  ApiError e;
  e.status = status;
  e.type = "server_error";
  e.message = message;
  return e;
}

ChoiceOut choice_of(const Rendered& r, int index, bool with_logprobs) {
  ChoiceOut c;
  c.index = index;
  c.text = r.text;
  c.finish = r.finish;
  c.with_logprobs = with_logprobs;
  if (with_logprobs) c.tokens = r.tokens, c.token_logprobs = r.logprobs, c.text_offset = r.offsets;
  return c;
}
}  // namespace

Rendered render(const tok::Tokenizer& tk, const SeqProgress& p,
                const std::vector<std::string>& stops) {
  Rendered r;
  size_t n = p.out.size();
  if (p.finish == Finish::StopToken && n > 0) --n;  // the end-of-document id is not text
  r.text = cut_at_stop(tk.decode(p.out.data(), n), stops);
  int64_t at = 0;
  for (size_t i = 0; i < n && at < int64_t(r.text.size()); ++i) {
    const std::string t = tk.decode(&p.out[i], 1);
    r.tokens.push_back(t);
    r.logprobs.push_back(i < p.logprobs.size() ? p.logprobs[i] : 0.0f);
    r.offsets.push_back(at);
    at += int64_t(t.size());
  }
  switch (p.finish) {
    case Finish::Running:
      r.finish = nullptr;
      break;
    case Finish::Length:
      r.finish = "length";
      break;
    case Finish::StopToken:
    case Finish::Stopped:
      r.finish = "stop";
      break;
  }
  return r;
}

HttpFrontEnd::HttpFrontEnd(Board& board, const tok::Tokenizer& tk, ServeInfo info, int threads)
    : board_(board), tk_(tk), info_(std::move(info)), svr_(std::make_unique<httplib::Server>()) {
  seed_base_ = (uint64_t(std::random_device{}()) << 32) ^ uint64_t(std::random_device{}());
  httplib::Server& s = *svr_;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  s.set_payload_max_length(size_t(16) << 20);
  s.set_keep_alive_timeout(2);
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a second server would
  // silently share a port that is taken instead of failing to bind.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool draining = board_.draining();
    send_json(res, draining ? 503 : 200, json{{"status", draining ? "draining" : "ok"}});
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200,
              json{{"object", "list"},
                   {"data", json::array({json{{"id", info_.model_id},
                                              {"object", "model"},
                                              {"created", info_.created},
                                              {"owned_by", "loom"}}})}});
  });
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    ParsedRequest parsed = parse_completion_request(req.body, info_.model_id);
    if (!parsed.params) return send_error(res, parsed.error);
    auto job = std::make_shared<Job>();
    job->params = std::move(*parsed.params);
    const uint64_t number = g_request_number++;
    job->seed =
        job->params.seed ? *job->params.seed : seed_base_ + 0x9E3779B97F4A7C15ull * (number + 1);
    auto enc = tk_.make_encoder();
    for (size_t i = 0; i < job->params.prompts.size(); ++i) {
      SeqProgress p;
      enc->encode(job->params.prompts[i], p.prompt);
      if (p.prompt.empty()) p.prompt.push_back(info_.eod);  // an empty prompt starts a document
      for (int32_t t : p.prompt)
        if (t < 0 || t >= info_.model_vocab) {
          ApiError e;
          e.param = "prompt";
          e.message = str("prompt ", i, " holds token id ", t, ", which the model's ",
                          info_.model_vocab, "-entry vocabulary (model.vocab_size) lacks");
          return send_error(res, e);
        }
      if (auto e = context_error(int(p.prompt.size()), job->params.max_tokens, info_.context, i))
        return send_error(res, *e);
      job->seqs.push_back(std::move(p));
    }
    if (!board_.submit(job))
      return send_error(res, server_error(503, "the server is shutting down"));
    const std::string id = str("cmpl-", number);
    const int64_t created = int64_t(std::time(nullptr));  // the request's time, as OpenAI's
    const std::vector<std::string>& stops = job->params.stop;
    if (!job->params.stream) {
      int64_t version = -1;
      bool done = false;
      std::vector<SeqProgress> prog;
      while (!done) prog = board_.wait(job, version, 1000, &version, &done);
      std::vector<ChoiceOut> choices;
      int64_t prompt_tokens = 0, completion_tokens = 0;
      for (size_t i = 0; i < prog.size(); ++i) {
        choices.push_back(choice_of(render(tk_, prog[i], stops), int(i), job->params.logprobs));
        prompt_tokens += int64_t(prog[i].prompt.size());
        completion_tokens += int64_t(prog[i].out.size());
      }
      return send_json(
          res, 200,
          completion_json(id, created, info_.model_id, choices, prompt_tokens, completion_tokens));
    }
    // Streaming: each call of the provider waits for progress and sends what became final.
    struct StreamState {
      int64_t version = -1;
      std::vector<size_t> sent_bytes, sent_tokens;
      std::vector<bool> closed;
    };
    auto st = std::make_shared<StreamState>();
    const size_t n = job->seqs.size();
    st->sent_bytes.assign(n, 0);
    st->sent_tokens.assign(n, 0);
    st->closed.assign(n, false);
    res.set_header("Cache-Control", "no-cache");
    ++streams_;
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, st, id, created](size_t, httplib::DataSink& sink) -> bool {
          // httplib does not catch what a provider throws: end the stream instead of the process.
          try {
            bool done = false;
            const std::vector<SeqProgress> prog =
                board_.wait(job, st->version, 200, &st->version, &done);
            std::string out;
            bool all_closed = true;
            for (size_t i = 0; i < prog.size(); ++i) {
              if (st->closed[i]) continue;
              const Rendered r = render(tk_, prog[i], job->params.stop);
              const bool finished = prog[i].finish != Finish::Running;
              const size_t fin = final_length(r.text, job->params.stop, finished);
              ChoiceOut c;
              c.index = int(i);
              c.finish = r.finish;
              c.with_logprobs = job->params.logprobs;
              if (fin > st->sent_bytes[i])
                c.text = r.text.substr(st->sent_bytes[i], fin - st->sent_bytes[i]);
              size_t k = st->sent_tokens[i];
              for (; k < r.tokens.size() && size_t(r.offsets[k]) < fin; ++k) {
                c.tokens.push_back(r.tokens[k]);
                c.token_logprobs.push_back(r.logprobs[k]);
                c.text_offset.push_back(r.offsets[k]);
              }
              if (!c.text.empty() || finished)
                out += sse_event(chunk_json(id, created, info_.model_id, c));
              st->sent_bytes[i] = std::max(st->sent_bytes[i], fin);
              st->sent_tokens[i] = k;
              if (finished) st->closed[i] = true;
              all_closed = all_closed && st->closed[i];
            }
            if (all_closed) out += sse_done();
            if (!out.empty() && !sink.write(out.data(), out.size())) return false;
            if (all_closed) sink.done();
            return true;
          } catch (const std::exception&) {
            return false;
          }
        },
        [this, job](bool success) {
          if (!success) board_.cancel(job);  // the client went away: free its slots
          --streams_;
        });
  });
  s.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        send_error(res, server_error(500, what));
      });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e;
    e.status = res.status;
    e.message = res.status == 404 ? str("no route ", req.method, " ", req.path,
                                        "; loom serve answers POST /v1/completions, GET "
                                        "/v1/models and GET /health")
                                  : str("HTTP ", res.status);
    send_error(res, e);
  });
}

HttpFrontEnd::~HttpFrontEnd() { stop(); }

int HttpFrontEnd::start(const std::string& host, int port) {
  int bound = port;
  if (port == 0) {
    bound = svr_->bind_to_any_port(host);
  } else if (!svr_->bind_to_port(host, port)) {
    bound = -1;
  }
  if (bound <= 0)
    throw UserError(str("loom serve: cannot listen on ", host, ":", port,
                        " (in use, or not an address of this host): pick another --port or "
                        "--host"));
  listener_ = std::thread([this] { svr_->listen_after_bind(); });
  return bound;
}

void HttpFrontEnd::stop() {
  if (!listener_.joinable()) return;
  // httplib ends a stream between two writes once the server stops: let the streams of the
  // requests already answered send their last pieces and [DONE] first (at most 30 s).
  for (int i = 0; i < 3000 && streams_ > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  svr_->stop();
  listener_.join();
}

}  // namespace loom::serve
