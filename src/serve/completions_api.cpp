// Checks of a completions request, parameter by parameter, and the JSON loom serve answers.
#include "serve/completions_api.h"

#include <cmath>
#include <set>

#include "core/check.h"

namespace loom::serve {

using json = nlohmann::json;

json error_json(const ApiError& e) {
  json err{{"message", e.message}, {"type", e.type}};
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return json{{"error", err}};
}

namespace {
ApiError bad(const std::string& param, const std::string& message) {
  ApiError e;
  e.param = param;
  e.message = message;
  return e;
}

// A JSON value as the message shows it (strings quoted, long values shortened).
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// The parameters loom serves, and those it accepts only at their neutral value.
const std::set<std::string> kServed = {"model",  "prompt",   "max_tokens", "temperature",
                                       "top_p",  "top_k",    "seed",       "stop",
                                       "stream", "logprobs", "user",       "stream_options"};
const std::set<std::string> kNeutralOnly = {
    "n", "best_of", "echo", "suffix", "presence_penalty", "frequency_penalty", "logit_bias"};

bool is_neutral(const std::string& key, const json& v) {
  if (v.is_null()) return true;
  if (key == "n" || key == "best_of") return v.is_number_integer() && v.get<int64_t>() == 1;
  if (key == "echo") return v.is_boolean() && !v.get<bool>();
  if (key == "logit_bias") return v.is_object() && v.empty();
  if (key == "presence_penalty" || key == "frequency_penalty")
    return v.is_number() && v.get<double>() == 0.0;
  return false;  // suffix
}
}  // namespace

ParsedRequest parse_completion_request(const std::string& body, const std::string& model_id) {
  ParsedRequest out;
  auto fail = [&](ApiError e) {
    out.error = std::move(e);
    return out;
  };
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail(bad("", "the request body is not valid JSON"));
  if (!j.is_object()) return fail(bad("", "the request body must be a JSON object"));
  for (const auto& [key, v] : j.items()) {
    if (kServed.count(key)) continue;
    if (kNeutralOnly.count(key)) {
      if (!is_neutral(key, v))
        return fail(bad(key, str("'", key, "' = ", shown(v),
                                 " is not served; leave it out (loom serve returns one choice "
                                 "per prompt, without echo, suffix, penalties or logit bias)")));
      continue;
    }
    return fail(bad(key, str("unrecognized request argument '", key, "'")));
  }
  CompletionParams p;
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) return fail(bad("model", "'model' must be a string"));
    if (j["model"].get<std::string>() != model_id) {
      ApiError e = bad("model", str("the model '", j["model"].get<std::string>(),
                                    "' does not exist; this server serves '", model_id, "'"));
      e.status = 404;
      e.code = "model_not_found";
      return fail(e);
    }
  }
  if (!j.contains("prompt") || j["prompt"].is_null())
    return fail(bad("prompt", "'prompt' is required: a string or a list of strings"));
  const json& prompt = j["prompt"];
  if (prompt.is_string()) {
    p.prompts.push_back(prompt.get<std::string>());
  } else if (prompt.is_array() && !prompt.empty()) {
    for (const json& e : prompt) {
      if (!e.is_string())
        return fail(bad("prompt", str("'prompt' must be a string or a list of strings; an "
                                      "element is ",
                                      shown(e), " (token ids are not served)")));
      p.prompts.push_back(e.get<std::string>());
    }
  } else {
    return fail(bad("prompt", str("'prompt' must be a string or a non-empty list of strings, "
                                  "got ",
                                  shown(prompt))));
  }
  if (j.contains("max_tokens") && !j["max_tokens"].is_null()) {
    const json& v = j["max_tokens"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 30))
      return fail(bad("max_tokens", str("'max_tokens' must be an integer >= 1, got ", shown(v))));
    p.max_tokens = int(v.get<int64_t>());
  }
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    const json& v = j["temperature"];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 ||
        v.get<double>() > 2)
      return fail(
          bad("temperature", str("'temperature' must be a number in [0, 2], got ", shown(v))));
    p.sample.temperature = float(v.get<double>());
  }
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    const json& v = j["top_p"];
    if (!v.is_number() || !(v.get<double>() > 0 && v.get<double>() <= 1))
      return fail(bad("top_p", str("'top_p' must be a number in (0, 1], got ", shown(v))));
    p.sample.top_p = float(v.get<double>());
    if (!(p.sample.top_p > 0.0f))  // a double in (0, 1] that rounds to float 0
      return fail(
          bad("top_p", str("'top_p' = ", shown(v), " is below the smallest float above 0")));
  }
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    const json& v = j["top_k"];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (1 << 30))
      return fail(
          bad("top_k", str("'top_k' must be an integer >= 0 (0: every token), got ", shown(v))));
    p.sample.top_k = int(v.get<int64_t>());
  }
  if (j.contains("seed") && !j["seed"].is_null()) {
    const json& v = j["seed"];
    if (!v.is_number_integer())
      return fail(bad("seed", str("'seed' must be an integer, got ", shown(v))));
    p.seed = v.is_number_unsigned() ? v.get<uint64_t>() : uint64_t(v.get<int64_t>());
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& v = j["stop"];
    std::vector<json> items =
        v.is_array() ? std::vector<json>(v.begin(), v.end()) : std::vector<json>{v};
    if (items.size() > 4)
      return fail(bad("stop", str("'stop' holds at most 4 strings, got ", items.size())));
    for (const json& s : items) {
      if (!s.is_string() || s.get<std::string>().empty())
        return fail(bad(
            "stop", str("'stop' must be a non-empty string or a list of them, got ", shown(v))));
      p.stop.push_back(s.get<std::string>());
    }
  }
  if (j.contains("stream_options") && j["stream_options"].is_object() &&
      j["stream_options"].value("include_usage", false))
    return fail(bad("stream_options", "'stream_options': {'include_usage': true} is not served"));
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean())
      return fail(bad("stream", str("'stream' must be true or false, got ", shown(j["stream"]))));
    p.stream = j["stream"].get<bool>();
  }
  if (j.contains("logprobs") && !j["logprobs"].is_null()) {
    const json& v = j["logprobs"];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 5)
      return fail(bad("logprobs", str("'logprobs' must be an integer in [0, 5], got ", shown(v))));
    if (v.get<int64_t>() > 0)
      return fail(bad("logprobs", str("'logprobs' = ", shown(v),
                                      ": only the chosen token's logprob is served; ask for "
                                      "'logprobs': 0")));
    p.logprobs = true;
  }
  const std::string wrong = sample_options_problem(p.sample);  // what the generator would refuse
  if (!wrong.empty()) return fail(bad("", "sampling: " + wrong));
  out.params = std::move(p);
  return out;
}

std::optional<ApiError> context_error(int n_prompt, int max_tokens, int context, size_t index) {
  if (int64_t(n_prompt) + max_tokens <= context) return std::nullopt;
  return bad("max_tokens",
             str("this model's maximum context length is ", context, " tokens, but prompt ", index,
                 " is ", n_prompt, " tokens and asks for ", max_tokens,
                 " more (max_tokens): shorten the prompt or lower max_tokens"));
}

json choice_json(const ChoiceOut& c) {
  json j{{"text", c.text}, {"index", c.index}};
  if (c.with_logprobs) {
    j["logprobs"] = json{{"tokens", c.tokens},
                         {"token_logprobs", c.token_logprobs},
                         {"top_logprobs", nullptr},
                         {"text_offset", c.text_offset}};
  } else {
    j["logprobs"] = nullptr;
  }
  j["finish_reason"] = c.finish ? json(c.finish) : json(nullptr);
  return j;
}

json completion_json(const std::string& id, int64_t created, const std::string& model,
                     const std::vector<ChoiceOut>& choices, int64_t prompt_tokens,
                     int64_t completion_tokens) {
  json cs = json::array();
  for (const ChoiceOut& c : choices) cs.push_back(choice_json(c));
  return json{{"id", id},
              {"object", "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", cs},
              {"usage",
               {{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens}}}};
}

json chunk_json(const std::string& id, int64_t created, const std::string& model,
                const ChoiceOut& choice) {
  return json{{"id", id},
              {"object", "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", json::array({choice_json(choice)})}};
}

std::string sse_event(const json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace loom::serve
