// The prompts of loom generate --prompts FILE: one prompt per line, or JSON lines
// {"prompt": TEXT, "max_tokens": N, "stop": [TEXT, ...]} (the last two optional).
#pragma once
#include <string>
#include <vector>

namespace loom::cli {

struct PromptLine {
  std::string text;
  int max_tokens = -1;            // -1: the command's --max-tokens
  std::vector<std::string> stop;  // added to the command's --stop
};

struct PromptFile {
  std::vector<PromptLine> prompts;
  bool json = false;  // JSON lines (the first non-empty line starts with '{')
};

// Reads `path`. Plain text: every line is a prompt (a trailing empty line is not). JSON lines:
// every non-empty line is one object with a string "prompt". Throws UserError naming the file,
// the line and the fix: a file that cannot be read, a line that is not such an object, a file
// without prompts.
PromptFile read_prompts(const std::string& path);

}  // namespace loom::cli
