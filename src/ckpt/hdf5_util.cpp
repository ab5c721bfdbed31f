// Checked HDF5 calls: file open/create, dataset shape, fp32 writes and 2-D hyperslab reads.
#include "ckpt/hdf5_util.h"

#include <fstream>

#include "core/check.h"

namespace loom::h5 {

hid_t check(hid_t rc, const char* call, const std::string& file) {
  if (rc < 0) throw InternalError(str("HDF5 call ", call, " failed for file '", file, "'"));
  return rc;
}

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    close_ = o.close_;
    o.id_ = -1;
  }
  return *this;
}

void Handle::reset() {
  if (id_ >= 0 && close_) close_(id_);
  id_ = -1;
}

void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

Handle open_read(const std::string& path, const std::string& what) {
  quiet();
  std::ifstream probe(path, std::ios::binary);
  if (!probe) throw UserError(str(what, " '", path, "' does not exist or cannot be read"));
  if (H5Fis_hdf5(path.c_str()) <= 0)
    throw UserError(str(what, " '", path, "' is not an HDF5 file"));
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw UserError(str(what, " '", path, "' could not be opened as HDF5"));
  return Handle(f, H5Fclose);
}

Handle create(const std::string& path) {
  quiet();
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) throw UserError(str("cannot create HDF5 file '", path, "' (check the directory)"));
  return Handle(f, H5Fclose);
}

bool has_dataset(hid_t file, const std::string& name) {
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0) return false;
  H5O_info_t info;
  if (H5Oget_info_by_name(file, name.c_str(), &info, H5P_DEFAULT) < 0) return false;
  return info.type == H5O_TYPE_DATASET;
}

std::vector<hsize_t> dataset_shape(hid_t file, const std::string& name, const std::string& path) {
  Handle ds(LOOM_H5(H5Dopen2(file, name.c_str(), H5P_DEFAULT), path), H5Dclose);
  Handle sp(LOOM_H5(H5Dget_space(ds.get()), path), H5Sclose);
  int nd = int(LOOM_H5(H5Sget_simple_extent_ndims(sp.get()), path));
  std::vector<hsize_t> dims(static_cast<size_t>(nd));
  if (nd > 0) LOOM_H5(H5Sget_simple_extent_dims(sp.get(), dims.data(), nullptr), path);
  return dims;
}

void write_f32(hid_t file, const std::string& name, const std::vector<hsize_t>& shape,
               const float* data, const std::string& path) {
  Handle sp(LOOM_H5(H5Screate_simple(int(shape.size()), shape.data(), nullptr), path), H5Sclose);
  Handle ds(LOOM_H5(H5Dcreate2(file, name.c_str(), H5T_IEEE_F32LE, sp.get(), H5P_DEFAULT,
                               H5P_DEFAULT, H5P_DEFAULT),
                    path),
            H5Dclose);
  LOOM_H5(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path);
}

void write_f32_2d(hid_t file, const std::string& name, hsize_t rows, hsize_t cols,
                  const float* data, const std::string& path) {
  hsize_t dims[2] = {rows, cols};
  Handle sp(LOOM_H5(H5Screate_simple(2, dims, nullptr), path), H5Sclose);
  Handle lcpl(LOOM_H5(H5Pcreate(H5P_LINK_CREATE), path), H5Pclose);
  LOOM_H5(H5Pset_create_intermediate_group(lcpl.get(), 1), path);
  Handle ds(LOOM_H5(H5Dcreate2(file, name.c_str(), H5T_IEEE_F32LE, sp.get(), lcpl.get(),
                               H5P_DEFAULT, H5P_DEFAULT),
                    path),
            H5Dclose);
  LOOM_H5(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path);
}

void read_block_f32(hid_t file, const std::string& name, hsize_t row0, hsize_t col0, hsize_t rows,
                    hsize_t cols, float* dst, hsize_t ld, const std::string& path) {
  Handle ds(LOOM_H5(H5Dopen2(file, name.c_str(), H5P_DEFAULT), path), H5Dclose);
  Handle fsp(LOOM_H5(H5Dget_space(ds.get()), path), H5Sclose);
  int nd = int(LOOM_H5(H5Sget_simple_extent_ndims(fsp.get()), path));
  if (nd == 2) {
    hsize_t start[2] = {row0, col0}, count[2] = {rows, cols};
    LOOM_H5(H5Sselect_hyperslab(fsp.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), path);
  } else {
    LOOM_CHECK(nd == 1 && row0 == 0 && rows == 1, name, ": rank ", nd, " block read");
    hsize_t start[1] = {col0}, count[1] = {cols};
    LOOM_H5(H5Sselect_hyperslab(fsp.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), path);
  }
  // Memory: a rows x ld array, selecting the first `cols` of each row.
  hsize_t mdims[2] = {rows, ld}, mstart[2] = {0, 0}, mcount[2] = {rows, cols};
  Handle msp(LOOM_H5(H5Screate_simple(2, mdims, nullptr), path), H5Sclose);
  LOOM_H5(H5Sselect_hyperslab(msp.get(), H5S_SELECT_SET, mstart, nullptr, mcount, nullptr), path);
  LOOM_H5(H5Dread(ds.get(), H5T_NATIVE_FLOAT, msp.get(), fsp.get(), H5P_DEFAULT, dst), path);
}

}  // namespace loom::h5
