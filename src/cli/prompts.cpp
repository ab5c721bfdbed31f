// Reading the prompts file of loom generate.
#include "cli/prompts.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"

namespace loom::cli {

namespace {
PromptLine json_line(const std::string& path, size_t n, const std::string& line) {
  auto bad = [&](const std::string& what) {
    return UserError(str("--prompts ", path, " line ", n, ": ", what,
                         "; each line must be {\"prompt\": \"...\"} with optional "
                         "\"max_tokens\": N and \"stop\": [\"...\"]"));
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception&) {
    throw bad("not valid JSON");
  }
  if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string())
    throw bad("no string \"prompt\"");
  PromptLine p;
  p.text = j["prompt"].get<std::string>();
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "prompt") continue;
    if (k == "max_tokens") {
      if (!it->is_number_integer() || it->get<long long>() < 1 || it->get<long long>() > 1 << 30)
        throw bad("\"max_tokens\" must be a positive integer");
      p.max_tokens = it->get<int>();
    } else if (k == "stop") {
      if (!it->is_array()) throw bad("\"stop\" must be a list of strings");
      for (const auto& s : *it) {
        if (!s.is_string() || s.get<std::string>().empty())
          throw bad("\"stop\" must be a list of non-empty strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      throw bad(str("unknown key \"", k, "\""));
    }
  }
  return p;
}
}  // namespace

PromptFile read_prompts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw UserError(str("--prompts ", path,
                        ": cannot open the file; give a text file "
                        "with one prompt per line, or JSON lines {\"prompt\": ...}"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string all = ss.str();
  if (!all.empty() && all.back() == '\n') all.pop_back();
  std::vector<std::string> lines;
  std::istringstream ls(all);
  for (std::string l; std::getline(ls, l);) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
    lines.push_back(l);
  }
  if (all.empty()) lines.clear();
  PromptFile f;
  for (const std::string& l : lines)
    if (!l.empty()) {
      f.json = l.front() == '{';
      break;
    }
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!f.json) {
      f.prompts.push_back(PromptLine{lines[i], -1, {}});
    } else if (!lines[i].empty()) {
      f.prompts.push_back(json_line(path, i + 1, lines[i]));
    }
  }
  if (f.prompts.empty())
    throw UserError(str("--prompts ", path, " holds no prompts; write one prompt per line"));
  return f;
}

}  // namespace loom::cli
