// Helpers shared by the data tests: scratch directories and raw byte files.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace loom::testing {

// A fresh directory under the build tree, named after the test; removed by nobody (inspectable).
inline std::string scratch_dir(const std::string& name) {
  std::string dir = std::string(LOOM_BINARY_DIR) + "/tests/scratch/" + name + "-" + std::to_string(::getpid());
  std::string cmd = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) std::perror("mkdir");
  return dir;
}

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return;
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);  // data() may be null
  std::fclose(f);
}

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::vector<uint8_t> out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  uint8_t buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}

inline bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Little-endian appends for hand-built files.
template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

}  // namespace loom::testing
