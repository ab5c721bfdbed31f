// safetensors: header validation, pread block reads with F16/BF16/F64 -> fp32, atomic F32 writer.
#include "ckpt/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "ckpt/file_util.h"
#include "core/check.h"
#include "core/json_util.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; loom converts it with plain copies");

namespace loom {

using json = nlohmann::json;

namespace {

struct DtypeName {
  const char* name;
  StDtype dtype;
  int size;  // bytes per element
};

constexpr DtypeName kDtypes[] = {
    {"BOOL", StDtype::BOOL, 1},       {"U8", StDtype::U8, 1},           {"I8", StDtype::I8, 1},
    {"F8_E5M2", StDtype::F8_E5M2, 1}, {"F8_E4M3", StDtype::F8_E4M3, 1}, {"I16", StDtype::I16, 2},
    {"U16", StDtype::U16, 2},         {"F16", StDtype::F16, 2},         {"BF16", StDtype::BF16, 2},
    {"I32", StDtype::I32, 4},         {"U32", StDtype::U32, 4},         {"F32", StDtype::F32, 4},
    {"F64", StDtype::F64, 8},         {"I64", StDtype::I64, 8},         {"U64", StDtype::U64, 8},
};

const DtypeName* dtype_by_name(const std::string& s) {
  for (const DtypeName& d : kDtypes)
    if (s == d.name) return &d;
  return nullptr;
}

int dtype_size(StDtype t) {
  for (const DtypeName& d : kDtypes)
    if (d.dtype == t) return d.size;
  return 0;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

// Reads exactly n bytes at offset off; false when the file ends first.
bool pread_all(int fd, void* buf, size_t n, uint64_t off, int* err) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, off_t(off));
    if (got < 0) {
      if (errno == EINTR) continue;
      *err = errno;
      return false;
    }
    if (got == 0) {
      *err = 0;
      return false;
    }
    p += got, n -= size_t(got), off += uint64_t(got);
  }
  return true;
}

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    // Zero or subnormal: man * 2^-24, exact in fp32.
    float f = float(man) * 0x1p-24f;
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);  // inf, NaN (payload kept)
  } else {
    bits = sign | ((exp + 112u) << 23) | (man << 13);  // rebias 15 -> 127
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void convert(const unsigned char* src, StDtype t, int64_t n, float* dst) {
  switch (t) {
    case StDtype::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case StDtype::F64:
      for (int64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, src + 8 * i, 8);
        dst[i] = float(d);
      }
      return;
    case StDtype::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t bits = (uint32_t(src[2 * i]) | uint32_t(src[2 * i + 1]) << 8) << 16;
        std::memcpy(&dst[i], &bits, 4);
      }
      return;
    case StDtype::F16:
      for (int64_t i = 0; i < n; ++i)
        dst[i] = half_to_float(uint16_t(src[2 * i] | src[2 * i + 1] << 8));
      return;
    default:
      LOOM_CHECK(false, "convert called for a non-float dtype");
  }
}

// A non-negative JSON integer, or -1.
int64_t as_count(const json& v) {
  if (v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t(INT64_MAX)) return v.get<int64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
  return -1;
}

// Writes the pieces under path.tmp, fsyncs, renames; cleans the temporary up on failure.
template <typename WriteFn>
void write_atomic(const std::string& path, const char* what, WriteFn&& body) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw UserError(str("cannot create ", what, " '", tmp, "': ", std::strerror(errno),
                        " (check that the directory exists and is writable)"));
  bool ok = body(fd) && ::fsync(fd) == 0;
  int err = errno;
  if (::close(fd) != 0 && ok) ok = false, err = errno;
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) ok = false, err = errno;
  if (!ok) {
    ::unlink(tmp.c_str());
    throw UserError(str("cannot write ", what, " '", path, "': ", std::strerror(err),
                        " (check free space and permissions)"));
  }
  fsync_dir_of(path);
}

}  // namespace

int64_t StTensorInfo::rows() const {
  int64_t r = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
  return r;
}

int64_t StTensorInfo::cols() const { return shape.empty() ? 1 : shape.back(); }

bool StTensorInfo::is_float() const {
  return dtype == StDtype::F32 || dtype == StDtype::F16 || dtype == StDtype::BF16 ||
         dtype == StDtype::F64;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const std::string where = str("safetensors file '", path, "'");
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0)
    throw UserError(str(where, " cannot be opened: ", std::strerror(errno), " (check the path)"));
  // The destructor does not run when the constructor throws: close here.
  struct Guard {
    int& fd;
    bool armed = true;
    ~Guard() {
      if (armed && fd >= 0) ::close(fd), fd = -1;
    }
  } guard{fd_};

  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode))
    throw UserError(str(where, " is not a regular file (give the path of model.safetensors)"));
  file_size_ = uint64_t(st.st_size);
  if (file_size_ < 8)
    throw UserError(
        str(where, " is truncated: ", file_size_,
            " bytes, shorter than the 8-byte header length (re-download or re-export it)"));
  unsigned char len8[8];
  int err = 0;
  if (!pread_all(fd_, len8, 8, 0, &err))
    throw UserError(str(where, " cannot be read: ", std::strerror(err)));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | len8[i];
  if (n < 2 || n > kMaxHeader)
    throw UserError(str(where, " has a header length of ", n, " bytes (must be 2..", kMaxHeader,
                        "): it is not a safetensors file or is corrupt"));
  if (n > file_size_ - 8)
    throw UserError(str(where, " has a header length of ", n, " bytes but the file has only ",
                        file_size_, " bytes: it is truncated (re-download or re-export it)"));
  data_start_ = 8 + n;
  std::string text(size_t(n), '\0');
  if (!pread_all(fd_, &text[0], size_t(n), 8, &err))
    throw UserError(str(where, " cannot be read: ", std::strerror(err)));
  if (text[0] != '{')
    throw UserError(str(where, ": the header does not start with '{' (not a safetensors file)"));

  // Parse, remembering a duplicated top-level name (the JSON library would keep the last one).
  std::set<std::string> seen;
  std::string dup;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& v) {
    if (ev == json::parse_event_t::key && depth == 1 && v.is_string()) {
      const std::string& k = v.get_ref<const std::string&>();
      if (!seen.insert(k).second && dup.empty()) dup = k;
    }
    return true;
  };
  // The header nests 3 levels (name -> shape -> dimension); deeper is not safetensors.
  const json h = parse_json_text(text, 8, where + ": the JSON header is malformed", cb);
  if (!h.is_object())
    throw UserError(str(where, ": the JSON header is not an object (not a safetensors file)"));
  if (!dup.empty())
    throw UserError(str(where, ": the header names '", dup, "' twice (the file is corrupt)"));

  const uint64_t data_size = file_size_ - data_start_;
  struct Range {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object())
        throw UserError(str(where, ": '__metadata__' must be an object of strings"));
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw UserError(str(where, ": '__metadata__' entry '", m.key(),
                              "' is not a string (the format allows only strings there)"));
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string bad = str(where, ": tensor '", name, "' ");
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      throw UserError(bad + "must be an object with 'dtype', 'shape' and 'data_offsets'");
    StTensorInfo t;
    if (!v["dtype"].is_string()) throw UserError(bad + "has a dtype that is not a string");
    t.dtype_name = v["dtype"].get<std::string>();
    const DtypeName* d = dtype_by_name(t.dtype_name);
    if (!d) {
      std::string known;
      for (const DtypeName& k : kDtypes) known += (known.empty() ? "" : ", ") + std::string(k.name);
      throw UserError(str(bad, "has unknown dtype '", t.dtype_name, "' (known: ", known, ")"));
    }
    t.dtype = d->dtype;
    const json& shape = v["shape"];
    if (!shape.is_array()) throw UserError(bad + "has a shape that is not an array");
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& dim : shape) {
      int64_t x = as_count(dim);
      if (x < 0)
        throw UserError(str(bad, "has shape dimension ", json_brief(dim),
                            ": dimensions must be integers >= 0"));
      t.shape.push_back(x);
      overflow |= __builtin_mul_overflow(numel, uint64_t(x), &numel);
    }
    uint64_t bytes = 0;
    overflow |= __builtin_mul_overflow(numel, uint64_t(d->size), &bytes);
    const json& off = v["data_offsets"];
    int64_t b = off.is_array() && off.size() == 2 ? as_count(off[0]) : -1;
    int64_t e = off.is_array() && off.size() == 2 ? as_count(off[1]) : -1;
    if (b < 0 || e < 0 || b > e)
      throw UserError(str(bad, "has data_offsets ",
                          off.is_array() && off.size() == 2
                              ? str("[", json_brief(off[0]), ", ", json_brief(off[1]), "]")
                              : json_brief(off),
                          ": they must be [begin, end] with 0 <= begin <= end"));
    t.begin = uint64_t(b), t.end = uint64_t(e);
    if (t.end > data_size)
      throw UserError(str(bad, "has data_offsets [", b, ",", e, "] beyond the ", data_size,
                          "-byte data section: the file is truncated or corrupt"));
    if (overflow || t.end - t.begin != bytes)
      throw UserError(str(bad, "holds ", t.end - t.begin, " bytes but dtype ", t.dtype_name,
                          " and shape ", shape_str(t.shape), " need ",
                          overflow ? std::string("more than 2^64") : std::to_string(bytes),
                          ": the file is corrupt"));
    auto ins = tensors_.emplace(name, std::move(t));
    if (ins.first->second.end > ins.first->second.begin)
      ranges.push_back({ins.first->second.begin, ins.first->second.end, &ins.first->first});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].begin < ranges[i - 1].end)
      throw UserError(str(where, ": tensors '", *ranges[i - 1].name, "' and '", *ranges[i].name,
                          "' overlap in the data section: the file is corrupt"));
  guard.armed = false;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

const StTensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void SafetensorsFile::read_block_f32(const std::string& name, int64_t row0, int64_t col0,
                                     int64_t rows, int64_t cols, float* dst, int64_t ld) const {
  const StTensorInfo* t = find(name);
  if (!t) throw UserError(str("safetensors file '", path_, "' has no tensor '", name, "'"));
  if (!t->is_float())
    throw UserError(str("safetensors file '", path_, "': tensor '", name, "' has dtype ",
                        t->dtype_name, "; weights must be F32, F16, BF16 or F64"));
  const int64_t R = t->rows(), C = t->cols();
  LOOM_CHECK(row0 >= 0 && col0 >= 0 && rows >= 0 && cols >= 0 && row0 + rows <= R &&
                 col0 + cols <= C && ld >= cols,
             "block (", row0, ",", col0, ") ", rows, "x", cols, " ld ", ld, " outside '", name,
             "' viewed as ", R, "x", C);
  if (rows == 0 || cols == 0) return;
  const int64_t es = dtype_size(t->dtype);
  // Whole rows are contiguous: read several per pread (about 8 MiB); otherwise one row each.
  const int64_t per = cols == C ? std::max<int64_t>(1, (int64_t(8) << 20) / (C * es)) : 1;
  std::vector<unsigned char> buf(size_t(std::min(per, rows) * cols * es));
  for (int64_t r = 0; r < rows; r += per) {
    const int64_t n = std::min(per, rows - r);
    const uint64_t off = data_start_ + t->begin + uint64_t(((row0 + r) * C + col0) * es);
    int err = 0;
    if (!pread_all(fd_, buf.data(), size_t(n * cols * es), off, &err))
      throw UserError(str("safetensors file '", path_, "': reading tensor '", name, "' failed (",
                          err ? std::strerror(err) : "unexpected end of file",
                          "); was the file changed while loom read it?"));
    for (int64_t i = 0; i < n; ++i)
      convert(buf.data() + i * cols * es, t->dtype, cols, dst + (r + i) * ld);
  }
}

void write_safetensors(const std::string& path,
                       const std::map<std::string, CanonicalTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const auto& [name, t] : tensors) {
    LOOM_CHECK(name != "__metadata__", "a tensor cannot be named __metadata__");
    LOOM_CHECK(t.ndim == 1 || t.ndim == 2, "tensor ", name, " has ndim ", t.ndim);
    LOOM_CHECK(t.data.size() == size_t(t.rows * t.cols) && (t.ndim == 2 || t.rows == 1), "tensor ",
               name, " holds ", t.data.size(), " values for ", t.rows, "x", t.cols);
    json shape = t.ndim == 1 ? json::array({t.cols}) : json::array({t.rows, t.cols});
    uint64_t bytes = uint64_t(t.data.size()) * 4;
    h[name] = {
        {"dtype", "F32"}, {"shape", shape}, {"data_offsets", json::array({off, off + bytes})}};
    off += bytes;
  }
  std::string text = h.dump();
  while (text.size() % 8 != 0) text += ' ';  // data starts 8-aligned (8 + header length)
  unsigned char len8[8];
  for (int i = 0; i < 8; ++i)
    len8[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
  write_atomic(path, "safetensors file", [&](int fd) {
    if (!write_all(fd, len8, 8) || !write_all(fd, text.data(), text.size())) return false;
    for (const auto& kv : tensors)  // same (sorted) order as the offsets above
      if (!write_all(fd, kv.second.data.data(), kv.second.data.size() * 4)) return false;
    return true;
  });
}

}  // namespace loom
