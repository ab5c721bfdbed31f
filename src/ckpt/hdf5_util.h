// Thin RAII handles and checked calls over the HDF5 C API.
#pragma once
#include <hdf5.h>

#include <mutex>
#include <string>
#include <vector>

namespace loom::h5 {

// Throws InternalError naming the call, the file and the value when an HDF5 call fails (< 0).
hid_t check(hid_t rc, const char* call, const std::string& file);
#define LOOM_H5(call, file) ::loom::h5::check((call), #call, (file))

class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  void reset();

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// HDF5 is called from one thread at a time. A thread that makes HDF5 calls while another may
// (the asynchronous checkpoint writer) holds this for its whole sequence of calls; open_read and
// create take it too, so a sequence that starts on another thread waits for the writer.
std::recursive_mutex& serial();

// Silences HDF5's own error stack printing; loom reports errors itself. Call once per process.
void quiet();

// Opens an existing file read-only; UserError naming the path when it is missing or not HDF5.
Handle open_read(const std::string& path, const std::string& what);
Handle create(const std::string& path);
// Whether `name` (a path like "param/x/0") names a dataset: false when it or a group on its way
// is missing or is another kind of object; UserError naming the file when HDF5 cannot read an
// object on the way (a corrupt file, a dangling link).
bool has_dataset(hid_t file, const std::string& name, const std::string& path);
// The shape of a weights dataset; UserError naming the file and the dataset when it is missing,
// not floating point, or keeps its data in other files (external storage, virtual dataset).
std::vector<hsize_t> dataset_shape(hid_t file, const std::string& name, const std::string& path);
// Writes an fp32 dataset of the given shape (contiguous data).
void write_f32(hid_t file, const std::string& name, const std::vector<hsize_t>& shape,
               const float* data, const std::string& path);
// Writes a 2-D fp32 dataset at a path like "param/h.0.ln_1.weight/0", creating the groups.
void write_f32_2d(hid_t file, const std::string& path_in_file, hsize_t rows, hsize_t cols,
                  const float* data, const std::string& path);
// Reads rows x cols starting at (row0, col0) of a (viewed as 2-D) dataset into dst with row
// stride ld, converting to fp32. The dataset is checked as by dataset_shape and the block must
// lie inside it; UserError otherwise and when the read fails (a corrupt or filtered file).
void read_block_f32(hid_t file, const std::string& name, hsize_t row0, hsize_t col0, hsize_t rows,
                    hsize_t cols, float* dst, hsize_t ld, const std::string& path);

}  // namespace loom::h5
