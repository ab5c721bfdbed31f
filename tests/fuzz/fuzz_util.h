// Shared pieces of the fuzz entry points: splitting one input into several files, scratch files.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::fuzz {

// Separates the files packed into one fuzz input (a line of its own in text seeds).
constexpr std::string_view kSep = "\n@@loom-fuzz-next-file@@\n";

// The input cut at each kSep into at most `n` parts (the last part keeps any further kSep);
// missing parts are empty.
std::vector<std::string_view> split(const uint8_t* data, size_t size, size_t n);
// The parts joined with kSep: how seeds are packed.
std::string join(const std::vector<std::string>& parts);

// A directory private to this process (under $TMPDIR or /tmp), created when missing.
const std::string& scratch_dir();
void write_file(const std::string& path, std::string_view bytes);
std::string read_file(const std::string& path);

// Little-endian reader over fuzz bytes: past the end every read returns 0.
class ByteReader {
 public:
  ByteReader(std::string_view s) : p_(s.data()), n_(s.size()) {}
  bool done() const { return i_ >= n_; }
  uint8_t u8() { return i_ < n_ ? uint8_t(p_[i_++]) : 0; }
  uint32_t u32() {
    return u8() | uint32_t(u8()) << 8 | uint32_t(u8()) << 16 | uint32_t(u8()) << 24;
  }
  uint64_t u64() { return u32() | uint64_t(u32()) << 32; }

 private:
  const char* p_;
  size_t n_, i_ = 0;
};

}  // namespace loom::fuzz
