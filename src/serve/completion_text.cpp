// Stop strings and the stream's hold-back of a completion's text.
#include "serve/completion_text.h"

#include <algorithm>

namespace loom::serve {

size_t stop_at(const std::string& text, const std::vector<std::string>& stops) {
  size_t at = std::string::npos;
  for (const std::string& s : stops)
    if (!s.empty()) at = std::min(at, text.find(s));
  return at;
}

std::string cut_at_stop(const std::string& text, const std::vector<std::string>& stops) {
  return text.substr(0, stop_at(text, stops));
}

namespace {
// Bytes a UTF-8 sequence has that starts with lead byte c (1 for ASCII and for bytes that
// cannot start one, which hold nothing back).
size_t utf8_length(unsigned char c) {
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

// The start of an incomplete UTF-8 sequence at the end of s, or s.size() when there is none.
size_t incomplete_tail(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    return utf8_length(c) > back ? n - back : n;
  }
  return n;
}
}  // namespace

size_t final_length(const std::string& visible, const std::vector<std::string>& stops,
                    bool finished) {
  if (finished) return visible.size();
  size_t keep = incomplete_tail(visible);
  // The longest end of the text that is a proper beginning of a stop string.
  for (const std::string& s : stops) {
    for (size_t len = std::min(s.size() - (s.empty() ? 0 : 1), visible.size()); len > 0; --len) {
      if (visible.compare(visible.size() - len, len, s, 0, len) == 0) {
        keep = std::min(keep, visible.size() - len);
        break;
      }
    }
  }
  return keep;
}

}  // namespace loom::serve
