// MMIDIDX reader (mmap, validated at open) and writer (temporary names, renamed at finish).
#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "core/check.h"

namespace loom {

namespace mmidx {
bool valid_dtype(int code) { return code >= 1 && code <= 8; }
size_t dtype_size(IdxDType t) {
  static const size_t sizes[9] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
  const int code = int(t);
  return valid_dtype(code) ? sizes[code] : 0;
}
const char* dtype_name(IdxDType t) {
  static const char* names[9] = {"invalid", "uint8", "int8",    "int16",  "int32",
                                 "int64",   "float64", "float32", "uint16"};
  const int code = int(t);
  return valid_dtype(code) ? names[code] : names[0];
}
bool is_integer_dtype(IdxDType t) {
  return valid_dtype(int(t)) && t != IdxDType::Float64 && t != IdxDType::Float32;
}
IdxDType dtype_for_vocab(int64_t vocab_size) {
  return vocab_size < 65500 ? IdxDType::UInt16 : IdxDType::Int32;
}
}  // namespace mmidx

// ---- MappedFile ------------------------------------------------------------------------
MappedFile::MappedFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UserError(str(path, ": cannot open (", std::strerror(errno), ")"));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UserError(str(path, ": not a regular file"));
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw UserError(str(path, ": cannot map (", std::strerror(e), ")"));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}
MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}
MappedFile::MappedFile(MappedFile&& o) noexcept : data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}
MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

// ---- reader ----------------------------------------------------------------------------
template <typename T>
static T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string ip = idx_path(), bp = bin_path();
  idx_ = MappedFile(ip);
  const uint8_t* p = idx_.data();
  const size_t n = idx_.size();
  const std::string corrupt = " (re-create it with loom-preprocess or Megatron-LM's preprocess_data.py)";
  LOOM_USER_CHECK(n >= mmidx::kHeaderBytes, ip, ": truncated index: ", n, " bytes, the header alone is ",
                  mmidx::kHeaderBytes, corrupt);
  LOOM_USER_CHECK(std::memcmp(p, mmidx::kMagic, 9) == 0, ip,
                  ": not a Megatron MMIDIDX index (wrong magic bytes; expected \"MMIDIDX\\0\\0\")");
  uint64_t version = load<uint64_t>(p + 9);
  LOOM_USER_CHECK(version == mmidx::kVersion, ip, ": unsupported MMIDIDX version ", version,
                  " (only version 1 is defined)");
  const int code = p[17];
  LOOM_USER_CHECK(mmidx::valid_dtype(code), ip, ": dtype code ", code,
                  " is out of range (Megatron codes are 1..8)", corrupt);
  dtype_ = mmidx::IdxDType(code);
  item_ = mmidx::dtype_size(dtype_);
  uint64_t s = load<uint64_t>(p + 18), d1 = load<uint64_t>(p + 26);
  const uint64_t cap = uint64_t(n);  // each entry takes at least 1 byte: cheap overflow guard
  LOOM_USER_CHECK(s <= cap && d1 <= cap, ip, ": truncated index: header claims ", s,
                  " sequences and ", d1, " document-index entries in a ", n, "-byte file", corrupt);
  const uint64_t need = mmidx::kHeaderBytes + 12 * s + 8 * d1;
  LOOM_USER_CHECK(n >= need, ip, ": truncated index: ", n, " bytes, the header (", s, " sequences, ",
                  d1, " document-index entries) needs ", need, corrupt);
  LOOM_USER_CHECK(n == need || n == need + s, ip, ": index has ", n - need,
                  " unexpected trailing bytes after the document index", corrupt);
  LOOM_USER_CHECK(d1 >= 1, ip, ": the document index is empty (it must start with 0)", corrupt);
  num_seqs_ = int64_t(s);
  num_docs1_ = int64_t(d1);
  sizes_ = p + mmidx::kHeaderBytes;
  pointers_ = sizes_ + 4 * s;
  doc_idx_ = pointers_ + 8 * s;

  LOOM_USER_CHECK(doc_index(0) == 0, ip, ": document index starts at ", doc_index(0), ", not 0",
                  corrupt);
  for (int64_t i = 1; i < num_docs1_; ++i)
    LOOM_USER_CHECK(doc_index(i) >= doc_index(i - 1) && doc_index(i) <= num_seqs_, ip,
                    ": document index entry ", i, " = ", doc_index(i), " is out of order or past ",
                    num_seqs_, " sequences", corrupt);
  LOOM_USER_CHECK(doc_index(num_docs1_ - 1) == num_seqs_, ip, ": document index ends at ",
                  doc_index(num_docs1_ - 1), " but there are ", num_seqs_, " sequences", corrupt);

  // The extent of .bin that the index describes, from the index alone, so that a .bin of
  // another size is refused with both sizes before any token is read.
  int64_t end = 0;
  for (int64_t i = 0; i < num_seqs_; ++i) {
    const int64_t len = sequence_length(i), ptr = sequence_pointer(i);
    LOOM_USER_CHECK(len >= 0, ip, ": sequence ", i, " has negative length ", len, corrupt);
    LOOM_USER_CHECK(ptr >= 0 && len <= (std::numeric_limits<int64_t>::max() - ptr) / int64_t(item_),
                    ip, ": sequence ", i, " has byte offset ", ptr, " and ", len,
                    " tokens, outside any file", corrupt);
    end = std::max(end, ptr + len * int64_t(item_));
    LOOM_USER_CHECK(!__builtin_add_overflow(num_tokens_, len, &num_tokens_), ip,
                    ": the token count overflows int64", corrupt);
  }
  bin_ = MappedFile(bp);
  const int64_t bsize = int64_t(bin_.size());
  LOOM_USER_CHECK(bsize >= end, bp, " is ", bsize, " bytes but ", ip, " describes ", end,
                  " bytes (", num_seqs_, " sequences, ", num_tokens_, " ",
                  mmidx::dtype_name(dtype_),
                  " tokens): the .bin is truncated or belongs to another index", corrupt);
  LOOM_USER_CHECK(end == bsize, bp, ": ", bsize - end,
                  " trailing bytes after the last sequence of the index (", end,
                  " bytes expected): .bin and .idx do not belong together", corrupt);
}

int64_t IndexedDataset::document_tokens(int64_t d) const {
  int64_t t = 0;
  for (int64_t s = doc_begin(d); s < doc_end(d); ++s) t += sequence_length(s);
  return t;
}

void IndexedDataset::read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const {
  LOOM_CHECK(seq >= 0 && seq < num_seqs_ && offset >= 0 && count >= 0 &&
                 offset + count <= sequence_length(seq),
             "read(", seq, ", ", offset, ", ", count, ") outside ", prefix_);
  if (count == 0) return;  // out may be null then, and an empty .bin maps to no address
  const uint8_t* p = bin_.data() + sequence_pointer(seq) + offset * int64_t(item_);
  switch (dtype_) {
    case mmidx::IdxDType::UInt16:
      for (int64_t i = 0; i < count; ++i) out[i] = load<uint16_t>(p + 2 * i);
      break;
    case mmidx::IdxDType::Int32:
      std::memcpy(out, p, size_t(count) * 4);
      break;
    case mmidx::IdxDType::UInt8:
      for (int64_t i = 0; i < count; ++i) out[i] = p[i];
      break;
    case mmidx::IdxDType::Int8:
      for (int64_t i = 0; i < count; ++i) out[i] = int8_t(p[i]);
      break;
    case mmidx::IdxDType::Int16:
      for (int64_t i = 0; i < count; ++i) out[i] = load<int16_t>(p + 2 * i);
      break;
    case mmidx::IdxDType::Int64:
      for (int64_t i = 0; i < count; ++i) {
        int64_t v = load<int64_t>(p + 8 * i);
        LOOM_USER_CHECK(v >= std::numeric_limits<int32_t>::min() &&
                            v <= std::numeric_limits<int32_t>::max(),
                        bin_path(), ": token ", v, " in sequence ", seq, " does not fit in int32");
        out[i] = int32_t(v);
      }
      break;
    default:
      throw UserError(str(bin_path(), ": holds ", mmidx::dtype_name(dtype_),
                          " values, not token ids (an integer dtype is required)"));
  }
}

// ---- writer ----------------------------------------------------------------------------
IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, mmidx::IdxDType dtype,
                                           size_t spill)
    : prefix_(prefix), dtype_(dtype), spill_(std::max<size_t>(spill, 1)) {
  LOOM_CHECK(mmidx::is_integer_dtype(dtype), "writer dtype code ", int(dtype));
  item_ = mmidx::dtype_size(dtype);
  const std::string tag = ".tmp-" + std::to_string(::getpid());
  bin_tmp_ = prefix + ".bin" + tag;
  idx_tmp_ = prefix + ".idx" + tag;
  sizes_tmp_ = prefix + ".sizes" + tag;
  docs_tmp_ = prefix + ".docidx" + tag;
  bin_ = std::fopen(bin_tmp_.c_str(), "wb");
  if (!bin_)
    throw UserError(str(prefix, ".bin: cannot create (", std::strerror(errno),
                        "); check that the output directory exists and is writable"));
  std::setvbuf(bin_, nullptr, _IOFBF, 1 << 20);
  push_doc(0);
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (!finished_) discard();
}

void IndexedDatasetWriter::discard() {
  for (std::FILE** f : {&bin_, &sizes_f_, &docs_f_})
    if (*f) std::fclose(*f), *f = nullptr;
  for (const std::string* p : {&bin_tmp_, &idx_tmp_, &sizes_tmp_, &docs_tmp_}) std::remove(p->c_str());
}

void IndexedDatasetWriter::write_bytes(const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, bin_) != n)
    throw UserError(str(bin_tmp_, ": write failed (", std::strerror(errno), ")"));
}

template <typename T>
void IndexedDatasetWriter::spill(std::vector<T>& buf, std::FILE*& f, const std::string& path) {
  if (!f && !(f = std::fopen(path.c_str(), "w+b")))
    throw UserError(str(path, ": cannot create (", std::strerror(errno), ")"));
  if (std::fwrite(buf.data(), sizeof(T), buf.size(), f) != buf.size())
    throw UserError(str(path, ": write failed (", std::strerror(errno), ")"));
  buf.clear();
}

void IndexedDatasetWriter::push_size(int32_t len) {
  sizes_.push_back(len);
  ++seqs_;
  tokens_ += len;
  if (sizes_.size() >= spill_) spill(sizes_, sizes_f_, sizes_tmp_);
}

void IndexedDatasetWriter::push_doc(int64_t first_seq) {
  doc_idx_.push_back(first_seq);
  ++docs1_;
  if (doc_idx_.size() >= spill_) spill(doc_idx_, docs_f_, docs_tmp_);
}

template <typename T>
static void convert(const int32_t* src, size_t n, uint8_t* dst) {
  for (size_t i = 0; i < n; ++i) {
    T v = T(src[i]);
    std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
  }
}

void IndexedDatasetWriter::add_sequence(const int32_t* tokens, size_t n) {
  LOOM_CHECK(!finished_, "add_sequence after finish");
  LOOM_CHECK(n <= size_t(std::numeric_limits<int32_t>::max()), "sequence of ", n, " tokens");
  if (dtype_ == mmidx::IdxDType::Int32) {
    write_bytes(tokens, n * 4);
  } else {
    int64_t lo = 0, hi = 0;
    switch (dtype_) {
      case mmidx::IdxDType::UInt16: hi = 65535; break;
      case mmidx::IdxDType::UInt8: hi = 255; break;
      case mmidx::IdxDType::Int8: lo = -128, hi = 127; break;
      case mmidx::IdxDType::Int16: lo = -32768, hi = 32767; break;
      default: lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
    }
    for (size_t i = 0; i < n; ++i)
      LOOM_USER_CHECK(tokens[i] >= lo && tokens[i] <= hi, prefix_, ".bin: token id ", tokens[i],
                      " does not fit the ", mmidx::dtype_name(dtype_), " dtype");
    conv_.resize(n * item_);
    switch (dtype_) {
      case mmidx::IdxDType::UInt16: convert<uint16_t>(tokens, n, conv_.data()); break;
      case mmidx::IdxDType::UInt8: convert<uint8_t>(tokens, n, conv_.data()); break;
      case mmidx::IdxDType::Int8: convert<int8_t>(tokens, n, conv_.data()); break;
      case mmidx::IdxDType::Int16: convert<int16_t>(tokens, n, conv_.data()); break;
      default: convert<int64_t>(tokens, n, conv_.data());
    }
    write_bytes(conv_.data(), conv_.size());
  }
  push_size(int32_t(n));
}

void IndexedDatasetWriter::end_document() { push_doc(seqs_); }

void IndexedDatasetWriter::add_document(const int32_t* tokens, size_t n) {
  add_sequence(tokens, n);
  end_document();
}

void IndexedDatasetWriter::append(const IndexedDataset& src) {
  LOOM_USER_CHECK(src.dtype() == dtype_, src.idx_path(), ": dtype ", mmidx::dtype_name(src.dtype()),
                  " differs from the output's ", mmidx::dtype_name(dtype_),
                  "; merge datasets made with the same tokenizer");
  const int64_t base = seqs_;
  for (int64_t s = 0; s < src.num_sequences(); ++s) {
    const int32_t len = src.sequence_length(s);
    write_bytes(src.sequence_bytes(s), size_t(len) * item_);
    push_size(len);
  }
  for (int64_t d = 1; d <= src.num_documents(); ++d) push_doc(base + src.doc_index(d));
}

// Streams spilled entries (if any) and then the in-memory tail through `sink`, in chunks.
template <typename T, typename Sink>
static void replay(std::FILE* f, const std::vector<T>& tail, const std::string& path, Sink sink) {
  std::vector<T> chunk(size_t(1) << 16);
  if (f) {
    std::fflush(f);
    std::rewind(f);
    size_t n;
    while ((n = std::fread(chunk.data(), sizeof(T), chunk.size(), f)) > 0) sink(chunk.data(), n);
    if (std::ferror(f)) throw UserError(str(path, ": read back failed (", std::strerror(errno), ")"));
  }
  sink(tail.data(), tail.size());
}

void IndexedDatasetWriter::finish() {
  LOOM_CHECK(!finished_, "finish twice");
  if (std::fclose(bin_) != 0) {
    bin_ = nullptr;
    throw UserError(str(bin_tmp_, ": write failed (", std::strerror(errno), ")"));
  }
  bin_ = nullptr;
  std::FILE* f = std::fopen(idx_tmp_.c_str(), "wb");
  if (!f) throw UserError(str(idx_tmp_, ": cannot create (", std::strerror(errno), ")"));
  std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
  bool ok = true;
  auto put = [&](const void* p, size_t size, size_t n) { ok = ok && std::fwrite(p, size, n, f) == n; };
  uint8_t head[mmidx::kHeaderBytes];
  const uint64_t version = mmidx::kVersion, s = uint64_t(seqs_), d1 = uint64_t(docs1_);
  std::memcpy(head, mmidx::kMagic, 9);
  std::memcpy(head + 9, &version, 8);
  head[17] = uint8_t(dtype_);
  std::memcpy(head + 18, &s, 8);
  std::memcpy(head + 26, &d1, 8);
  put(head, 1, sizeof head);
  replay(sizes_f_, sizes_, sizes_tmp_, [&](const int32_t* p, size_t n) { put(p, 4, n); });
  int64_t ptr = 0;  // pointers: running byte offsets, from the sizes read back once more
  std::vector<int64_t> ptrs;
  replay(sizes_f_, sizes_, sizes_tmp_, [&](const int32_t* p, size_t n) {
    ptrs.resize(n);
    for (size_t i = 0; i < n; ++i) {
      ptrs[i] = ptr;
      ptr += int64_t(p[i]) * int64_t(item_);
    }
    put(ptrs.data(), 8, n);
  });
  replay(docs_f_, doc_idx_, docs_tmp_, [&](const int64_t* p, size_t n) { put(p, 8, n); });
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw UserError(str(idx_tmp_, ": write failed (", std::strerror(errno), ")"));
  if (std::rename(bin_tmp_.c_str(), (prefix_ + ".bin").c_str()) != 0 ||
      std::rename(idx_tmp_.c_str(), (prefix_ + ".idx").c_str()) != 0)
    throw UserError(str(prefix_, ".bin/.idx: cannot rename the finished files into place (",
                        std::strerror(errno), ")"));
  finished_ = true;
  for (std::FILE** sp : {&sizes_f_, &docs_f_})
    if (*sp) std::fclose(*sp), *sp = nullptr;
  std::remove(sizes_tmp_.c_str());
  std::remove(docs_tmp_.c_str());
}

}  // namespace loom
