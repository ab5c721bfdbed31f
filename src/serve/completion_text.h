// The text of a completion as its ids arrive: where the first stop string cuts it, and how much
// of it a stream may send already (no later id can change that part).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace loom::serve {

// The position of the earliest stop string in text, or std::string::npos.
size_t stop_at(const std::string& text, const std::vector<std::string>& stops);

// text cut before its first stop string.
std::string cut_at_stop(const std::string& text, const std::vector<std::string>& stops);

// How many leading bytes of a running completion's visible text (already cut at a stop string)
// are final: it holds back a UTF-8 character whose last bytes have not arrived yet, and the
// longest end that could still grow into a stop string. A finished completion is final whole.
size_t final_length(const std::string& visible, const std::vector<std::string>& stops,
                    bool finished);

}  // namespace loom::serve
