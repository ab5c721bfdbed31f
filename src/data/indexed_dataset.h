// Megatron-LM MMIDIDX indexed datasets (PREFIX.bin + PREFIX.idx): an mmap reader that checks
// every structural invariant at open, and a writer that publishes both files by rename.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace loom {

// .idx layout (all little-endian), as written by Megatron-LM's _IndexWriter:
//   char     magic[9]  = "MMIDIDX\0\0"
//   uint64   version   = 1
//   uint8    dtype code  (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)
//   uint64   S           number of sequences
//   uint64   D1          length of the document index (documents + 1)
//   int32    sizes[S]    tokens per sequence
//   int64    pointers[S] byte offset of each sequence in .bin
//   int64    doc_idx[D1] first sequence of each document, doc_idx[0] = 0, doc_idx[D1-1] = S
//   (int8    modes[S]    only in Megatron's multimodal datasets; accepted and ignored)
// .bin: the tokens of every sequence, back to back, in the dtype above.
namespace mmidx {
constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // 34
// The dtype codes of the format: the numbers are what the .idx byte holds.
enum class IdxDType : uint8_t {
  UInt8 = 1,
  Int8 = 2,
  Int16 = 3,
  Int32 = 4,
  Int64 = 5,
  Float64 = 6,
  Float32 = 7,
  UInt16 = 8,
};
bool valid_dtype(int code);          // a code as read from a file
size_t dtype_size(IdxDType t);       // bytes per element (0 for an invalid value)
const char* dtype_name(IdxDType t);  // "uint16", ... or "invalid"
bool is_integer_dtype(IdxDType t);
// Megatron's choice for token files: uint16 when the vocabulary has fewer than 65500 ids.
IdxDType dtype_for_vocab(int64_t vocab_size);
}  // namespace mmidx

// A read-only memory map of a whole file (empty files map to nullptr/0).
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws UserError naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// The reader. Opening validates the header, the section sizes, the document index and that
// every sequence lies inside .bin and .bin has no trailing bytes; every problem is a UserError
// naming the file, what is wrong and (where there is one) the fix.
class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix);

  const std::string& prefix() const { return prefix_; }
  std::string idx_path() const { return prefix_ + ".idx"; }
  std::string bin_path() const { return prefix_ + ".bin"; }
  mmidx::IdxDType dtype() const { return dtype_; }

  int64_t num_sequences() const { return num_seqs_; }
  int64_t num_documents() const { return num_docs1_ - 1; }
  int64_t num_tokens() const { return num_tokens_; }
  // The sections start at byte 34, so they are not naturally aligned: read them through these
  // accessors (a memcpy each, one load after optimization), never through a cast pointer.
  int32_t sequence_length(int64_t i) const { return ld<int32_t>(sizes_ + 4 * i); }
  int64_t sequence_pointer(int64_t i) const { return ld<int64_t>(pointers_ + 8 * i); }
  int64_t doc_index(int64_t i) const { return ld<int64_t>(doc_idx_ + 8 * i); }  // i <= documents
  // Sequences [doc_begin(d), doc_end(d)) make up document d.
  int64_t doc_begin(int64_t d) const { return doc_index(d); }
  int64_t doc_end(int64_t d) const { return doc_index(d + 1); }
  int64_t document_tokens(int64_t d) const;

  // Copies tokens [offset, offset + count) of sequence `seq` into `out` as int32. Throws
  // UserError for a floating-point dtype and for int64 values outside int32.
  void read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const;
  // The raw bytes of sequence `seq` in .bin.
  const uint8_t* sequence_bytes(int64_t seq) const { return bin_.data() + sequence_pointer(seq); }

 private:
  template <typename T>
  static T ld(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }
  std::string prefix_;
  MappedFile idx_, bin_;
  mmidx::IdxDType dtype_ = mmidx::IdxDType::UInt16;
  size_t item_ = 0;
  int64_t num_seqs_ = 0, num_docs1_ = 0, num_tokens_ = 0;
  const uint8_t* sizes_ = nullptr;     // int32[S]
  const uint8_t* pointers_ = nullptr;  // int64[S]
  const uint8_t* doc_idx_ = nullptr;   // int64[D1]
};

// The writer: tokens stream to PREFIX.bin.tmp-PID; the index entries (12 bytes per document)
// are buffered and spilled to two temporary files every `spill` entries, so memory stays
// bounded for any corpus; finish() assembles PREFIX.idx.tmp-PID and renames both into place.
// Destroying an unfinished writer removes every temporary file: no partial output remains.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, mmidx::IdxDType dtype,
                       size_t spill = size_t(1) << 20);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // One sequence holding the whole document, then end_document() (what preprocessing does).
  void add_document(const int32_t* tokens, size_t n);
  // Megatron's finer form: several sequences per document, closed by end_document().
  void add_sequence(const int32_t* tokens, size_t n);
  void end_document();
  // Appends every document of `src` (same dtype) by copying bytes: no re-tokenization.
  void append(const IndexedDataset& src);

  void finish();  // writes the index, closes, renames into place
  int64_t num_documents() const { return docs1_ - 1; }
  int64_t num_sequences() const { return seqs_; }
  int64_t num_tokens() const { return tokens_; }
  mmidx::IdxDType dtype() const { return dtype_; }

 private:
  void write_bytes(const void* p, size_t n);
  void push_size(int32_t len);
  void push_doc(int64_t first_seq);
  template <typename T>
  void spill(std::vector<T>& buf, std::FILE*& f, const std::string& path);
  void discard();

  std::string prefix_, bin_tmp_, idx_tmp_, sizes_tmp_, docs_tmp_;
  mmidx::IdxDType dtype_;
  size_t item_, spill_;
  std::FILE* bin_ = nullptr;
  std::FILE* sizes_f_ = nullptr;  // spilled sizes (int32), opened on the first spill
  std::FILE* docs_f_ = nullptr;   // spilled document index entries (int64)
  std::vector<int32_t> sizes_;    // not yet spilled
  std::vector<int64_t> doc_idx_;  // not yet spilled (starts with the leading 0)
  std::vector<uint8_t> conv_;     // dtype conversion buffer
  int64_t seqs_ = 0, docs1_ = 0, tokens_ = 0;
  bool finished_ = false;
};

}  // namespace loom
