// Input expansion (files, globs, directories) and the streaming document reader.
#include "data_tools/inputs.h"

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace fs = std::filesystem;

namespace loom::tok {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The format of a corpus file from its extension, or false for anything else.
bool format_of(const std::string& path, InputFormat* format) {
  std::string p = path;
  if (ends_with(p, ".gz")) p.resize(p.size() - 3);
  if (ends_with(p, ".txt") || ends_with(p, ".text"))
    *format = InputFormat::Text;
  else if (ends_with(p, ".jsonl") || ends_with(p, ".json") || ends_with(p, ".ndjson"))
    *format = InputFormat::Jsonl;
  else
    return false;
  return true;
}

const char* kKinds = ".txt, .jsonl or .json (one JSON object per line), optionally .gz";

InputFile checked_file(const std::string& path) {
  InputFile f;
  f.path = path;
  LOOM_USER_CHECK(format_of(path, &f.format), path, ": unknown input type; expected ", kKinds);
  std::FILE* fp = std::fopen(path.c_str(), "rb");
  LOOM_USER_CHECK(fp, path, ": cannot read (", std::strerror(errno), ")");
  std::fclose(fp);
  std::error_code ec;
  f.size = fs::file_size(path, ec);
  return f;
}

void add_path(const std::string& path, std::vector<InputFile>& out) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<std::string> found;
    for (auto it = fs::recursive_directory_iterator(
             path, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      InputFormat fmt;
      if (it->is_regular_file(ec) && format_of(it->path().string(), &fmt))
        found.push_back(it->path().string());
    }
    LOOM_USER_CHECK(!ec, path, ": cannot list the directory (", ec.message(), ")");
    LOOM_USER_CHECK(!found.empty(), path, ": the directory holds no ", kKinds, " files");
    std::sort(found.begin(), found.end());
    for (const auto& p : found) out.push_back(checked_file(p));
    return;
  }
  LOOM_USER_CHECK(fs::exists(path, ec), path, ": no such file or directory");
  out.push_back(checked_file(path));
}

}  // namespace

std::vector<InputFile> expand_inputs(const std::vector<std::string>& args) {
  LOOM_USER_CHECK(!args.empty(), "no inputs: pass --input FILE|DIR|GLOB ...");
  std::vector<InputFile> out;
  for (const std::string& a : args) {
    if (a.find_first_of("*?[") == std::string::npos) {
      add_path(a, out);
      continue;
    }
    glob_t g;
    int rc = ::glob(a.c_str(), 0, nullptr, &g);  // matches come sorted
    if (rc != 0) {
      if (rc != GLOB_NOMATCH) ::globfree(&g);
      throw UserError(str(a, ": the pattern matches no file"));
    }
    // Like a directory's files, matches with other extensions are passed over.
    const size_t before = out.size();
    std::error_code ec;
    InputFormat fmt;
    for (size_t i = 0; i < g.gl_pathc; ++i)
      if (fs::is_directory(g.gl_pathv[i], ec) || format_of(g.gl_pathv[i], &fmt))
        add_path(g.gl_pathv[i], out);
    ::globfree(&g);
    LOOM_USER_CHECK(out.size() > before, a, ": the pattern matches no ", kKinds, " file");
  }
  return out;
}

// ---- reader -----------------------------------------------------------------------------
DocumentReader::DocumentReader(const std::vector<InputFile>& files, Split split, size_t batch_bytes)
    : files_(files), split_(split), batch_bytes_(batch_bytes), buf_(size_t(1) << 20) {}

DocumentReader::~DocumentReader() { close(); }

void DocumentReader::close() {
  if (gz_) {
    done_bytes_ += files_[open_index_].size;
    gzclose(gz_);
  }
  gz_ = nullptr;
}

bool DocumentReader::open_next() {
  if (current_ >= files_.size()) return false;
  open_index_ = uint32_t(current_++);
  const std::string& path = files_[open_index_].path;
  gz_ = gzopen(path.c_str(), "rb");
  LOOM_USER_CHECK(gz_, path, ": cannot read (", std::strerror(errno), ")");
  gzbuffer(gz_, 1 << 18);
  pos_ = len_ = 0;
  line_no_ = 0;
  return true;
}

bool DocumentReader::fill() {
  const int n = gzread(gz_, buf_.data(), unsigned(buf_.size()));
  int err = Z_OK;
  std::string msg = gzerror(gz_, &err);
  const std::string& path = files_[open_index_].path;
  if (msg.rfind(path + ": ", 0) == 0) msg = msg.substr(path.size() + 2);  // zlib prefixes the path
  LOOM_USER_CHECK(n >= 0 && (err == Z_OK || err == Z_STREAM_END), path, ": cannot read (", msg,
                  "; is the file truncated or not gzip?)");
  pos_ = 0;
  len_ = size_t(n);
  return n > 0;
}

bool DocumentReader::append_line(std::string& out) {
  while (true) {
    const char* start = buf_.data() + pos_;
    const char* nl = static_cast<const char*>(std::memchr(start, '\n', len_ - pos_));
    if (nl) {
      out.append(start, size_t(nl - start));
      pos_ = size_t(nl - buf_.data()) + 1;
      return true;
    }
    out.append(start, len_ - pos_);
    pos_ = len_;
    if (!fill()) return false;
  }
}

uint64_t DocumentReader::bytes_consumed() const {
  return done_bytes_ + (gz_ ? uint64_t(std::max<z_off_t>(gzoffset(gz_), 0)) : 0);
}

// True when text[from..] holds only spaces, tabs, \r, \f or \v.
static bool blank(const std::string& text, size_t from) {
  for (size_t i = from; i < text.size(); ++i) {
    const char ch = text[i];
    if (ch != ' ' && ch != '\t' && ch != '\r' && ch != '\f' && ch != '\v') return false;
  }
  return true;
}

// Lines are appended straight from the read buffer into the batch (no per-line string), and
// taken back out when they turn out blank.
bool DocumentReader::next(Batch& b) {
  b.text.clear();
  b.docs.clear();
  b.index = batches_;
  while (b.text.size() < batch_bytes_) {
    if (!gz_ && !open_next()) break;
    const uint32_t file = open_index_;
    DocRef d;
    d.file = file;
    d.offset = b.text.size();
    if (files_[file].format == InputFormat::Jsonl) {
      const bool more = append_line(b.text);
      if (!more && b.text.size() == d.offset) {
        close();
        continue;
      }
      ++line_no_;
      if (!more) close();
      if (blank(b.text, d.offset)) {
        b.text.resize(d.offset);
        continue;
      }
      d.line = line_no_;
      d.json = true;
    } else if (split_ == Split::File) {
      do b.text.append(buf_.data() + pos_, len_ - pos_);
      while (fill());
      close();
    } else {  // a paragraph: consecutive non-blank lines, joined by the newlines between them
      bool more = true, started = false;
      while (more) {
        const size_t mark = b.text.size();
        if (started) b.text += '\n';
        const size_t line_start = b.text.size();
        more = append_line(b.text);
        ++line_no_;
        if (blank(b.text, line_start)) {
          b.text.resize(mark);
          if (started) break;
          continue;
        }
        if (!started) d.line = line_no_;
        started = true;
      }
      if (!more) close();
      if (!started) continue;
    }
    d.length = b.text.size() - d.offset;
    b.docs.push_back(d);
  }
  if (b.docs.empty()) return false;
  ++batches_;
  return true;
}

}  // namespace loom::tok
