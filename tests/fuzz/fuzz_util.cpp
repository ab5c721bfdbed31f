// Input splitting and per-process scratch files for the fuzz entry points.
#include "tests/fuzz/fuzz_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"

namespace loom::fuzz {

std::vector<std::string_view> split(const uint8_t* data, size_t size, size_t n) {
  std::string_view s(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> out;
  while (out.size() + 1 < n) {
    size_t at = s.find(kSep);
    if (at == std::string_view::npos) break;
    out.push_back(s.substr(0, at));
    s.remove_prefix(at + kSep.size());
  }
  out.push_back(s);
  out.resize(n);
  return out;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? std::string(kSep) : "") + parts[i];
  return out;
}

const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* t = std::getenv("TMPDIR");
    return (std::filesystem::path(t && *t ? t : "/tmp") /
            ("loom_fuzz_" + std::to_string(::getpid())))
        .string();
  }();
  std::filesystem::create_directories(dir);  // again after a test removed it
  return dir;
}

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  LOOM_CHECK(f.good(), "cannot write scratch file ", path);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  LOOM_CHECK(f.good(), "cannot read ", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace loom::fuzz
