// Hugging Face safetensors files: a validating block reader (pread, fp32 out) and an fp32 writer.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ckpt/canonical.h"

namespace loom {

// Element types named by the safetensors format. Only the floating ones can be read as fp32;
// the others are accepted in a file (their byte ranges are validated) so that unrelated
// entries do not stop a load. The enumerators keep the format's own spellings ("BF16",
// "F8_E4M3", ...) rather than loom's CamelCase, so that each reads as the header string it is.
enum class StDtype { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };

struct StTensorInfo {
  std::string dtype_name;      // as written in the header, e.g. "BF16"
  StDtype dtype;
  std::vector<int64_t> shape;  // outermost first; empty for a scalar
  uint64_t begin = 0, end = 0; // byte range, relative to the start of the data section
  // The tensor seen as 2-D: rows = product of all dimensions but the last, cols = the last
  // (a 1-D tensor is one row, a scalar is 1 x 1).
  int64_t rows() const;
  int64_t cols() const;
  bool is_float() const;  // F16, BF16, F32 or F64: readable by read_block_f32
};

// An open, validated safetensors file. The constructor reads and checks only the header; tensor
// data is read on demand with pread, so files larger than memory are fine. Every problem with
// the file is a UserError naming the file (and the tensor when one is at fault).
class SafetensorsFile {
 public:
  // Largest header accepted (the format's reference implementation uses the same limit).
  static constexpr uint64_t kMaxHeader = uint64_t(100) << 20;

  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, StTensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const StTensorInfo* find(const std::string& name) const;

  // Reads rows x cols of tensor `name` (seen as 2-D) starting at (row0, col0) into dst with row
  // stride ld, converting F32, F16, BF16 and F64 to fp32. UserError for a missing tensor or a
  // non-float dtype; the block must lie inside the tensor (checked).
  void read_block_f32(const std::string& name, int64_t row0, int64_t col0, int64_t rows,
                      int64_t cols, float* dst, int64_t ld) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0, data_start_ = 0;
  std::map<std::string, StTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` as F32 little-endian in name order, with `metadata` as `__metadata__` (omitted
// when empty); the header is padded with spaces so that the data starts at a multiple of 8 bytes.
// Written under `path + ".tmp"`, fsynced, then renamed over `path`. UserError on I/O failure.
void write_safetensors(const std::string& path, const std::map<std::string, CanonicalTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace loom
