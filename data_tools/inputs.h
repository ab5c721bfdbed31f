// Input corpora for loom-preprocess: expanding files/globs/directories, and streaming their
// documents (text files, or paragraphs of them, or JSONL lines; each optionally gzip'ed).
#pragma once
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

namespace loom::tok {

enum class InputFormat { Text, Jsonl };

struct InputFile {
  std::string path;
  InputFormat format = InputFormat::Text;
  uint64_t size = 0;  // bytes on disk (compressed size for .gz)
};

// Files in the order given; a glob's matches and a directory's files (recursively: *.txt,
// *.jsonl, *.json, their .gz) in sorted order. The format comes from the extension. UserError
// for a pattern with no match, a directory without corpus files, an unreadable file, an unknown
// extension, or no inputs at all.
std::vector<InputFile> expand_inputs(const std::vector<std::string>& args);

// A document as found in the input, its bytes kept in a batch buffer.
struct DocRef {
  uint64_t offset = 0, length = 0;  // in Batch::text
  uint32_t file = 0;                // index into the file list
  uint64_t line = 0;                // 1-based line (JSONL line, paragraph's first line), 0: whole file
  bool json = false;                // the bytes are a JSONL line still to parse
};

struct Batch {
  uint64_t index = 0;
  std::string text;
  std::vector<DocRef> docs;
};

// Reads the inputs in order and cuts them into batches of about `batch_bytes` bytes. Each input
// is read through zlib's gzread, which passes uncompressed files through unchanged.
class DocumentReader {
 public:
  enum class Split { File, Paragraph };
  DocumentReader(const std::vector<InputFile>& files, Split split, size_t batch_bytes);
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  bool next(Batch& batch);       // false when every input is consumed
  uint64_t bytes_consumed() const;  // on-disk bytes read so far (for progress)

 private:
  bool open_next();
  bool fill();                      // refill buf_; false at end of the current file
  // Appends the next line (without its '\n') to `out`; false at end of file.
  bool append_line(std::string& out);
  void close();

  const std::vector<InputFile>& files_;
  Split split_;
  size_t batch_bytes_;
  size_t current_ = 0;        // next file to open
  gzFile gz_ = nullptr;
  uint32_t open_index_ = 0;
  uint64_t line_no_ = 0, done_bytes_ = 0;
  std::vector<char> buf_;
  size_t pos_ = 0, len_ = 0;
  uint64_t batches_ = 0;
};

}  // namespace loom::tok
