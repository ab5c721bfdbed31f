// Sanitizer builds only: copies everything the sanitizer runtimes print into a file per process.
//
// With gcc, UndefinedBehaviorSanitizer's runtime (libubsan) is a library of its own beside
// libasan, and its log_path option has no effect: the report path is set through
// __sanitizer_set_report_path, which libasan's copy of that function interposes, so UBSan
// reports only reach stderr, where a test of an expected failure may swallow them. Both
// runtimes call the weak hook __sanitizer_on_print for every piece of text they print; this
// definition, linked into every executable of a LOOM_SANITIZE build, appends that text to
// $LOOM_SANITIZER_LOG_DIR/report.<pid> (nothing happens when the variable is unset).
//
// It runs inside a report, possibly in a failing process: no allocation, no stdio, only
// open/write/close.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

extern "C" void __sanitizer_on_print(const char* text) {
  const char* dir = std::getenv("LOOM_SANITIZER_LOG_DIR");
  if (text == nullptr || dir == nullptr || dir[0] == '\0') return;
  char path[4096];
  const char kName[] = "/report.";
  const size_t dlen = std::strlen(dir);
  if (dlen + sizeof kName + 20 > sizeof path) return;
  std::memcpy(path, dir, dlen);
  std::memcpy(path + dlen, kName, sizeof kName - 1);
  size_t n = dlen + sizeof kName - 1;
  char digits[20];
  int nd = 0;
  for (unsigned long pid = (unsigned long)getpid(); nd == 0 || pid > 0; pid /= 10)
    digits[nd++] = char('0' + pid % 10);
  while (nd > 0) path[n++] = digits[--nd];
  path[n] = '\0';
  const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  for (size_t left = std::strlen(text); left > 0;) {
    const ssize_t w = write(fd, text, left);
    if (w <= 0) break;
    text += w;
    left -= size_t(w);
  }
  close(fd);
}
