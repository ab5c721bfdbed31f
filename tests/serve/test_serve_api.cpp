// The completions API of loom serve without a server: each parameter's checks and messages, the
// JSON of answers, and the hold-back of streamed text (stop strings, split UTF-8 characters).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "serve/completion_text.h"
#include "serve/completions_api.h"
#include "train/sampling.h"

namespace loom::serve {
namespace {

using json = nlohmann::json;

ParsedRequest parse(const std::string& body) { return parse_completion_request(body, "tiny"); }

// A request that must fail: the status, the parameter named, and a piece of the message.
void expect_error(const std::string& body, int status, const std::string& param,
                  const std::string& says) {
  const ParsedRequest r = parse(body);
  ASSERT_FALSE(r.params) << body;
  EXPECT_EQ(r.error.status, status) << body;
  EXPECT_EQ(r.error.param, param) << body;
  EXPECT_NE(r.error.message.find(says), std::string::npos) << body << " -> " << r.error.message;
}

TEST(CompletionsApi, DefaultsAndEveryServedParameter) {
  ParsedRequest r = parse(R"({"prompt": "Hello"})");
  ASSERT_TRUE(r.params);
  EXPECT_EQ(r.params->prompts, std::vector<std::string>{"Hello"});
  EXPECT_EQ(r.params->max_tokens, 16);  // OpenAI's default
  EXPECT_EQ(r.params->sample.temperature, 1.0f);
  EXPECT_EQ(r.params->sample.top_p, 1.0f);
  EXPECT_EQ(r.params->sample.top_k, 0);
  EXPECT_FALSE(r.params->seed);
  EXPECT_FALSE(r.params->stream);
  EXPECT_FALSE(r.params->logprobs);
  r = parse(R"({"model": "tiny", "prompt": ["a", ""], "max_tokens": 5, "temperature": 0,
               "top_p": 0.5, "top_k": 7, "seed": -3, "stop": ["x", "yz"], "stream": true,
               "logprobs": 0, "n": 1, "echo": false, "user": "u", "presence_penalty": 0,
               "logit_bias": {}, "best_of": null, "suffix": null})");
  ASSERT_TRUE(r.params) << r.error.message;
  const CompletionParams& p = *r.params;
  EXPECT_EQ(p.prompts, (std::vector<std::string>{"a", ""}));
  EXPECT_EQ(p.max_tokens, 5);
  EXPECT_EQ(p.sample.temperature, 0.0f);
  EXPECT_EQ(p.sample.top_p, 0.5f);
  EXPECT_EQ(p.sample.top_k, 7);
  EXPECT_EQ(*p.seed, uint64_t(-3));
  EXPECT_EQ(p.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.logprobs);
  r = parse(R"({"prompt": "a", "stop": "end", "max_tokens": null})");
  ASSERT_TRUE(r.params);
  EXPECT_EQ(r.params->stop, std::vector<std::string>{"end"});
  EXPECT_EQ(r.params->max_tokens, 16);
}

TEST(CompletionsApi, BadRequestsNameTheParameter) {
  expect_error("{\"prompt\": ", 400, "", "not valid JSON");
  expect_error("[1, 2]", 400, "", "must be a JSON object");
  expect_error("{}", 400, "prompt", "'prompt' is required");
  expect_error(R"({"prompt": 5})", 400, "prompt", "a string or a non-empty list");
  expect_error(R"({"prompt": []})", 400, "prompt", "a string or a non-empty list");
  expect_error(R"({"prompt": [1, 2]})", 400, "prompt", "token ids are not served");
  expect_error(R"({"prompt": "a", "max_tokens": 0})", 400, "max_tokens", "integer >= 1, got 0");
  expect_error(R"({"prompt": "a", "max_tokens": -4})", 400, "max_tokens", ">= 1, got -4");
  expect_error(R"({"prompt": "a", "max_tokens": "8"})", 400, "max_tokens", "got \"8\"");
  expect_error(R"({"prompt": "a", "max_tokens": 2.5})", 400, "max_tokens", "got 2.5");
  expect_error(R"({"prompt": "a", "temperature": -1})", 400, "temperature", "[0, 2]");
  expect_error(R"({"prompt": "a", "temperature": "hot"})", 400, "temperature", "[0, 2]");
  expect_error(R"({"prompt": "a", "top_p": 0})", 400, "top_p", "(0, 1]");
  expect_error(R"({"prompt": "a", "top_p": 1.5})", 400, "top_p", "(0, 1]");
  expect_error(R"({"prompt": "a", "top_p": 1e-46})", 400, "top_p", "smallest float above 0");
  expect_error(R"({"prompt": "a", "stream_options": {"include_usage": true}})", 400,
               "stream_options", "not served");
  expect_error(R"({"prompt": "a", "top_k": -1})", 400, "top_k", ">= 0");
  expect_error(R"({"prompt": "a", "seed": 1.5})", 400, "seed", "an integer");
  expect_error(R"({"prompt": "a", "stop": ""})", 400, "stop", "non-empty string");
  expect_error(R"({"prompt": "a", "stop": [1]})", 400, "stop", "non-empty string");
  expect_error(R"({"prompt": "a", "stop": ["1","2","3","4","5"]})", 400, "stop", "at most 4");
  expect_error(R"({"prompt": "a", "stream": "yes"})", 400, "stream", "true or false");
  expect_error(R"({"prompt": "a", "logprobs": 2})", 400, "logprobs", "ask for 'logprobs': 0");
  expect_error(R"({"prompt": "a", "logprobs": true})", 400, "logprobs", "[0, 5]");
  expect_error(R"({"prompt": "a", "n": 2})", 400, "n", "is not served");
  expect_error(R"({"prompt": "a", "echo": true})", 400, "echo", "is not served");
  expect_error(R"({"prompt": "a", "frequency_penalty": 0.5})", 400, "frequency_penalty",
               "is not served");
  expect_error(R"({"prompt": "a", "temprature": 0})", 400, "temprature",
               "unrecognized request argument 'temprature'");
  expect_error(R"({"prompt": "a", "model": 3})", 400, "model", "must be a string");
  const ParsedRequest r = parse(R"({"prompt": "a", "model": "gpt-4"})");
  ASSERT_FALSE(r.params);
  EXPECT_EQ(r.error.status, 404);
  EXPECT_EQ(r.error.code, "model_not_found");
  EXPECT_EQ(error_json(r.error).dump(),
            R"({"error":{"code":"model_not_found","message":"the model 'gpt-4' does not exist; )"
            R"(this server serves 'tiny'","param":"model","type":"invalid_request_error"}})");
}

TEST(CompletionsApi, ContextLimit) {
  EXPECT_FALSE(context_error(10, 22, 32, 0));  // 10 + 22 = 32 fits exactly
  const auto e = context_error(10, 23, 32, 1);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "max_tokens");
  EXPECT_EQ(e->message,
            "this model's maximum context length is 32 tokens, but prompt 1 is 10 tokens and "
            "asks for 23 more (max_tokens): shorten the prompt or lower max_tokens");
}

TEST(CompletionsApi, ResponseAndChunkJson) {
  ChoiceOut c;
  c.text = "hi";
  c.finish = "length";
  json j = completion_json("cmpl-3", 100, "tiny", {c}, 4, 2);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "hi");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"],
            (json{{"prompt_tokens", 4}, {"completion_tokens", 2}, {"total_tokens", 6}}));
  c.finish = nullptr;
  c.with_logprobs = true;
  c.tokens = {"h", "i"};
  c.token_logprobs = {-0.5f, -1.0f};
  c.text_offset = {0, 1};
  j = chunk_json("cmpl-3", 100, "tiny", c);
  EXPECT_FALSE(j.contains("usage"));
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(j["choices"][0]["logprobs"]["token_logprobs"], (json{-0.5, -1.0}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], (json{0, 1}));
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(CompletionText, StopStrings) {
  EXPECT_EQ(stop_at("abc END def", {"END"}), 4u);
  EXPECT_EQ(stop_at("abc END d", {"d", "END"}), 4u);  // the earliest of them
  EXPECT_EQ(stop_at("abc", {"x", ""}), std::string::npos);
  EXPECT_EQ(cut_at_stop("abc END def", {"END"}), "abc ");
  EXPECT_EQ(cut_at_stop("abc", {}), "abc");
}

TEST(CompletionText, StreamHoldsBackWhatALaterTokenCanChange) {
  // An end that could grow into a stop string waits; once it cannot, it goes.
  EXPECT_EQ(final_length("hello EN", {"END"}, false), 6u);
  EXPECT_EQ(final_length("hello E", {"END"}, false), 6u);
  EXPECT_EQ(final_length("hello EX", {"END"}, false), 8u);
  EXPECT_EQ(final_length("hello EN", {"END"}, true), 8u);  // finished: all of it
  EXPECT_EQ(final_length("abab", {"abc"}, false), 2u);     // the longest matching end
  // A UTF-8 character split over tokens: "é" is C3 A9, "€" E2 82 AC, "😀" F0 9F 98 80.
  EXPECT_EQ(final_length("caf\xC3", {}, false), 3u);
  EXPECT_EQ(final_length("caf\xC3\xA9", {}, false), 5u);
  EXPECT_EQ(final_length("x\xE2\x82", {}, false), 1u);
  EXPECT_EQ(final_length("x\xE2\x82\xAC", {}, false), 4u);
  EXPECT_EQ(final_length("x\xF0\x9F\x98", {}, false), 1u);
  EXPECT_EQ(final_length("x\xF0\x9F\x98\x80", {}, false), 5u);
  EXPECT_EQ(final_length("x\xA9", {}, false), 2u);  // a stray continuation byte holds nothing
  EXPECT_EQ(final_length("caf\xC3", {}, true), 4u);
}

// The chosen id's logprob against a direct evaluation in long double.
TEST(CompletionText, TokenLogprobIsTheLogSoftmax) {
  const std::vector<float> z = {1.5f, -2.0f, 0.25f, 3.0f, 3.0f};
  long double sum = 0;
  for (float v : z) sum += std::exp((long double)v);
  for (int id = 0; id < 5; ++id) {
    const double want = double((long double)z[size_t(id)] - std::log(sum));
    // float result of a double computation: within a float rounding of |want| (and 1e-7).
    EXPECT_NEAR(token_logprob(z.data(), 5, id), want, 1e-7 + 1.2e-7 * std::fabs(want)) << id;
  }
  // Only the first V ids count: the rest (the vocabulary's padding) are outside the softmax.
  EXPECT_NEAR(token_logprob(z.data(), 2, 1), -2.0 - std::log(std::exp(1.5) + std::exp(-2.0)), 1e-6);
}

}  // namespace
}  // namespace loom::serve
