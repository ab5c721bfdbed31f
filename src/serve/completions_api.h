// The subset of the OpenAI completions API that loom serve answers: a request's parameters,
// checked one by one into either CompletionParams or an ApiError, and the JSON of responses,
// stream chunks and errors.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "train/sampling.h"

namespace loom::serve {

struct ApiError {
  int status = 400;                            // the HTTP status
  std::string message;                         // what is wrong, naming the parameter
  std::string type = "invalid_request_error";  // OpenAI's error types
  std::string param;                           // the parameter, when one is at fault
  std::string code;                            // e.g. "model_not_found"
};
// {"error": {"message", "type", "param", "code"}} (param and code null when empty).
nlohmann::json error_json(const ApiError& e);

struct CompletionParams {
  std::vector<std::string> prompts;  // "prompt": one string or a list of them
  int max_tokens = 16;               // new tokens per prompt (OpenAI's default)
  SampleOptions sample;              // temperature (default 1), top_p, top_k; seed below
  std::optional<uint64_t> seed;      // absent: the server picks one
  std::vector<std::string> stop;     // up to 4 stop strings
  bool stream = false;
  bool logprobs = false;  // "logprobs": 0 (the chosen token's logprob per position)
};

// Parses a POST /v1/completions body. model_id: the one model served ("model" may be absent or
// must name it). Checks types and ranges only; the prompt's length against the context is the
// caller's (it needs the tokenizer).
struct ParsedRequest {
  std::optional<CompletionParams> params;
  ApiError error;  // when params is empty
};
ParsedRequest parse_completion_request(const std::string& body, const std::string& model_id);

// The error of a prompt of n_prompt tokens asking for max_tokens more on a model of context
// positions (400, param max_tokens), or nullopt when it fits.
std::optional<ApiError> context_error(int n_prompt, int max_tokens, int context, size_t index);

// One choice of a response or of a stream chunk.
struct ChoiceOut {
  int index = 0;
  std::string text;              // the whole text (response) or the new part (chunk)
  const char* finish = nullptr;  // "stop", "length"; nullptr while running (chunks)
  bool with_logprobs = false;
  std::vector<std::string> tokens;  // with_logprobs: each token's text, its logprob, its offset
  std::vector<float> token_logprobs;
  std::vector<int64_t> text_offset;
};
nlohmann::json choice_json(const ChoiceOut& c);

// A whole response: {"id", "object": "text_completion", "created", "model", "choices", "usage"}.
nlohmann::json completion_json(const std::string& id, int64_t created, const std::string& model,
                               const std::vector<ChoiceOut>& choices, int64_t prompt_tokens,
                               int64_t completion_tokens);
// One server-sent event of a stream: the same object with one choice and no usage.
nlohmann::json chunk_json(const std::string& id, int64_t created, const std::string& model,
                          const ChoiceOut& choice);
// "data: <json>\n\n"; the last event of a stream is sse_done().
std::string sse_event(const nlohmann::json& j);
std::string sse_done();

}  // namespace loom::serve
