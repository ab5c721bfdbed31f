// Chunk-at-a-time safetensors and HDF5 writers over POSIX files and HDF5 hyperslabs.
#include "ckpt/stream_writers.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ckpt/file_util.h"
#include "core/check.h"

namespace loom {

SafetensorsStreamWriter::SafetensorsStreamWriter(const std::string& path,
                                                 const std::vector<OutTensor>& outs,
                                                 const std::map<std::string, std::string>& metadata)
    : path_(path), tmp_(path + ".tmp") {
  using json = nlohmann::json;
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    const OutTensor& t = outs[i];
    LOOM_CHECK(i == 0 || outs[i - 1].name < t.name, "safetensors tensors out of order at ", t.name);
    LOOM_CHECK(t.name != "__metadata__" && (t.shape.size() == 1 || t.shape.size() == 2), "tensor ",
               t.name, " of ", t.shape.size(), " dimensions");
    const json shape =
        t.shape.size() == 1 ? json::array({t.cols()}) : json::array({t.rows(), t.cols()});
    const uint64_t bytes = uint64_t(t.rows() * t.cols()) * 4;
    h[t.name] = {
        {"dtype", "F32"}, {"shape", shape}, {"data_offsets", json::array({off, off + bytes})}};
    off += bytes;
  }
  left_ = off;
  std::string text = h.dump();
  while (text.size() % 8 != 0) text += ' ';  // data starts 8-aligned (8 + header length)
  unsigned char len8[8];
  for (int i = 0; i < 8; ++i)
    len8[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw UserError(str("cannot create safetensors file '", tmp_, "': ", std::strerror(errno),
                        " (check that the directory exists and is writable)"));
  if (!write_all(fd_, len8, 8) || !write_all(fd_, text.data(), text.size())) fail(errno);
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void SafetensorsStreamWriter::fail(int err) {
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  throw UserError(str("cannot write safetensors file '", path_, "': ", std::strerror(err),
                      " (check free space and permissions)"));
}

void SafetensorsStreamWriter::write(const float* values, size_t n) {
  LOOM_CHECK(fd_ >= 0 && n * 4 <= left_, "safetensors data past its header's ", left_, " bytes");
  if (!write_all(fd_, values, n * 4)) fail(errno);
  left_ -= n * 4;
}

void SafetensorsStreamWriter::commit() {
  LOOM_CHECK(fd_ >= 0 && left_ == 0, "safetensors file committed ", left_, " bytes short");
  if (::fsync(fd_) != 0) fail(errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    throw UserError(str("cannot write safetensors file '", path_, "': ", std::strerror(err),
                        " (check free space and permissions)"));
  }
  fsync_dir_of(path_);
}

Hdf5StreamWriter::Hdf5StreamWriter(const std::string& path)
    : path_(path), tmp_(path + ".tmp"), file_(h5::create(tmp_)) {}

Hdf5StreamWriter::~Hdf5StreamWriter() {
  if (done_) return;
  dataset_.reset();
  file_.reset();
  std::remove(tmp_.c_str());
}

void Hdf5StreamWriter::write(const OutTensor& t, const Rect& r, const float* values) {
  const bool one_d = t.shape.size() == 1;
  if (r.row0 == 0 && r.col0 == 0) {  // the tensor's first chunk
    dataset_.reset();
    const std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
    h5::Handle sp(LOOM_H5(H5Screate_simple(int(dims.size()), dims.data(), nullptr), tmp_),
                  H5Sclose);
    dataset_ = h5::Handle(LOOM_H5(H5Dcreate2(file_.get(), t.name.c_str(), H5T_IEEE_F32LE, sp.get(),
                                             H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                  tmp_),
                          H5Dclose);
  }
  const hsize_t start[2] = {hsize_t(r.row0), hsize_t(r.col0)};
  const hsize_t count[2] = {hsize_t(r.rows), hsize_t(r.cols)};
  const int nd = one_d ? 1 : 2;
  h5::Handle file_space(LOOM_H5(H5Dget_space(dataset_.get()), tmp_), H5Sclose);
  LOOM_H5(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, one_d ? start + 1 : start, nullptr,
                              one_d ? count + 1 : count, nullptr),
          tmp_);
  h5::Handle mem_space(LOOM_H5(H5Screate_simple(nd, one_d ? count + 1 : count, nullptr), tmp_),
                       H5Sclose);
  LOOM_H5(H5Dwrite(dataset_.get(), H5T_NATIVE_FLOAT, mem_space.get(), file_space.get(), H5P_DEFAULT,
                   values),
          tmp_);
}

void Hdf5StreamWriter::commit() {
  dataset_.reset();
  file_.reset();
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw UserError(str("cannot rename '", tmp_, "' to '", path_, "'"));
  done_ = true;
}

}  // namespace loom
