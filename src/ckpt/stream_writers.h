// Writers of canonical weight files that take the tensors chunk by chunk, in file order, as
// gather_chunks delivers them: safetensors (F32) and HDF5. Both write under <path>.tmp and
// rename when complete; an abandoned writer removes its temporary file.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ckpt/gather_chunks.h"
#include "ckpt/hdf5_util.h"

namespace loom {

class SafetensorsStreamWriter {
 public:
  // Writes the header of `outs` (which must be sorted by name: the data follows in that order,
  // the same file write_safetensors makes of the same tensors); UserError when it cannot.
  SafetensorsStreamWriter(const std::string& path, const std::vector<OutTensor>& outs,
                          const std::map<std::string, std::string>& metadata);
  ~SafetensorsStreamWriter();
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;
  void write(const float* values, size_t n);  // the next n values of the data section
  void commit();                              // every value written: sync and rename

 private:
  [[noreturn]] void fail(int err);
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t left_ = 0;  // data bytes still to come
};

class Hdf5StreamWriter {
 public:
  explicit Hdf5StreamWriter(const std::string& path);
  ~Hdf5StreamWriter();
  Hdf5StreamWriter(const Hdf5StreamWriter&) = delete;
  Hdf5StreamWriter& operator=(const Hdf5StreamWriter&) = delete;
  // Rectangle r of tensor t (rows x cols values); a tensor's first chunk creates its dataset.
  void write(const OutTensor& t, const Rect& r, const float* values);
  void commit();

 private:
  std::string path_, tmp_;
  h5::Handle file_, dataset_;
  bool done_ = false;
};

}  // namespace loom
