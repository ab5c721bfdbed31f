// fsync, CRC-32 (zlib) and atomic small-file writes.
#include "ckpt/file_util.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/check.h"

namespace loom {

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw UserError(str("cannot open '", path, "' to sync it: ", std::strerror(errno)));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw UserError(str("fsync of '", path, "' failed: ", std::strerror(errno)));
}

uint32_t file_crc32(const std::string& path, uint64_t* bytes) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw UserError(str("cannot read '", path, "': ", std::strerror(errno)));
  std::vector<unsigned char> buf(size_t(1) << 22);
  uLong crc = crc32(0L, Z_NULL, 0);
  uint64_t total = 0;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    crc = crc32_z(crc, buf.data(), n);
    total += n;
  }
  std::fclose(f);
  if (bytes) *bytes = total;
  return uint32_t(crc);
}

void write_text_file_atomic(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw UserError(str("cannot write '", tmp, "': ", std::strerror(errno)));
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fflush(f) == 0 && ok;
  ok = ::fsync(fileno(f)) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) throw UserError(str("writing '", tmp, "' failed: ", std::strerror(errno)));
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw UserError(str("cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno)));
}

bool write_all(int fd, const void* buf, size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t put = ::write(fd, p, n);
    if (put < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += put, n -= size_t(put);
  }
  return true;
}

void fsync_dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d >= 0) {
    ::fsync(d);
    ::close(d);
  }
}

}  // namespace loom
