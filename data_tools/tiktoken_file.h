// tiktoken rank files ("base64(token) rank" per line: r50k_base, cl100k_base, o200k_base) and
// the special tokens of those encodings.
#pragma once
#include <memory>
#include <string>

#include "data_tools/rank_bpe.h"

namespace loom::tok {

// The pattern of a rank file from its name: *r50k*/*gpt2* -> Gpt2, *cl100k* -> Cl100k,
// *o200k* -> O200k; false when the name tells none of them.
bool pattern_from_rank_file_name(const std::string& path, Pattern* out);

// Loads `path` (every line checked: a UserError names the line) and adds the special tokens of
// the encoding that uses `pattern` (<|endoftext|> first). Merges: adjacent tokens (a, b) merge
// with rank r when the bytes of a + b are the token of rank r, as in tiktoken.
std::unique_ptr<RankBpeModel> load_tiktoken_file(const std::string& path, Pattern pattern);

// Standard base64 (RFC 4648, '=' padding required) -> bytes; false for anything else.
bool base64_decode(const std::string& in, std::string* out);

}  // namespace loom::tok
