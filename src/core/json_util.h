// JSON from outside (safetensors headers, checkpoint meta.json, tokenizer vocabularies): a
// parse that refuses deep nesting early, and a short description of a value for messages.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "core/check.h"

namespace loom {

// Parses `text`; UserError "<where>: ..." when it is not JSON or nests deeper than max_depth
// (loom's files nest a few levels; a deeply nested value is slow to build and would overflow
// the stack of recursive code such as dump()). `cb` sees every event as in nlohmann::json.
inline nlohmann::json parse_json_text(const std::string& text, int max_depth,
                                      const std::string& where,
                                      nlohmann::json::parser_callback_t cb = nullptr) {
  auto guarded = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& v) {
    if (depth > max_depth)
      throw UserError(str(where, ": JSON nested deeper than ", max_depth,
                          " levels (the file is corrupt or not the expected kind)"));
    return cb ? cb(depth, ev, v) : true;
  };
  try {
    return nlohmann::json::parse(text, guarded);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(str(where, ": not valid JSON (", e.what(), ")"));
  }
}

// A value in a few words, without recursion: a number or short string as is, else its kind.
inline std::string json_brief(const nlohmann::json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    return s.size() <= 40 ? nlohmann::json(s).dump()
                          : nlohmann::json(s.substr(0, 40)).dump() + "...";
  }
  if (v.is_number() || v.is_boolean() || v.is_null()) return v.dump();
  return v.is_array() ? "an array" : v.is_object() ? "an object" : v.type_name();
}

}  // namespace loom
