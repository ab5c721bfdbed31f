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

std::recursive_mutex& serial() {
  static std::recursive_mutex m;
  return m;
}

void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

Handle open_read(const std::string& path, const std::string& what) {
  std::lock_guard<std::recursive_mutex> wait_for_writer(serial());
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
  std::lock_guard<std::recursive_mutex> wait_for_writer(serial());
  quiet();
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) throw UserError(str("cannot create HDF5 file '", path, "' (check the directory)"));
  return Handle(f, H5Fclose);
}

namespace {

// The innermost message of HDF5's error stack: the most specific cause of the last failure.
std::string last_error() {
  std::string msg;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        auto* s = static_cast<std::string*>(data);
        if (s->empty() && e->desc && *e->desc) *s = e->desc;
        return 0;
      },
      &msg);
  return msg.empty() ? "no detail from HDF5" : msg;
}

}  // namespace

bool has_dataset(hid_t file, const std::string& name, const std::string& path) {
  // One component at a time: H5Lexists fails, rather than answering no, when a group on the
  // way is missing, and a failure is then left to mean what it says (an unreadable file).
  const auto unreadable = [&](const std::string& part) {
    return UserError(str("HDF5 file '", path, "': '", part, "' cannot be read (", last_error(),
                         "): the file is corrupt or a link in it dangles"));
  };
  H5O_info_t info;
  for (size_t end = name.find('/', 1);; end = name.find('/', end + 1)) {
    const std::string part = name.substr(0, end);
    const htri_t exists = H5Lexists(file, part.c_str(), H5P_DEFAULT);
    if (exists == 0) return false;
    if (exists < 0 || H5Oget_info_by_name(file, part.c_str(), &info, H5P_DEFAULT) < 0)
      throw unreadable(part);
    if (end == std::string::npos) return info.type == H5O_TYPE_DATASET;
    if (info.type != H5O_TYPE_GROUP) return false;
  }
}

namespace {

const char* class_name(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER:
      return "integer";
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_VLEN:
      return "variable-length";
    case H5T_ARRAY:
      return "array";
    case H5T_ENUM:
      return "enum";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_REFERENCE:
      return "reference";
    case H5T_TIME:
      return "time";
    default:
      return "unknown";
  }
}

// Opens a dataset that loom can read as weights: floating point, data inside this file.
Handle open_weights(hid_t file, const std::string& name, const std::string& path) {
  const std::string where = str("HDF5 file '", path, "': dataset '", name, "'");
  if (!has_dataset(file, name, path)) throw UserError(where + " is missing or is not a dataset");
  hid_t id = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  if (id < 0) throw UserError(str(where, " cannot be opened (", last_error(), ")"));
  Handle ds(id, H5Dclose);
  Handle type(LOOM_H5(H5Dget_type(ds.get()), path), H5Tclose);
  const H5T_class_t c = H5Tget_class(type.get());
  if (c != H5T_FLOAT)
    throw UserError(
        str(where, " holds ", class_name(c), " values; weights must be floating point"));
  Handle dcpl(LOOM_H5(H5Dget_create_plist(ds.get()), path), H5Pclose);
  if (H5Pget_external_count(dcpl.get()) != 0 || H5Pget_layout(dcpl.get()) == H5D_VIRTUAL)
    throw UserError(where + " keeps its data in other files; loom reads self-contained files only");
  return ds;
}

std::vector<hsize_t> extent(hid_t ds, const std::string& path) {
  Handle sp(LOOM_H5(H5Dget_space(ds), path), H5Sclose);
  int nd = int(LOOM_H5(H5Sget_simple_extent_ndims(sp.get()), path));
  std::vector<hsize_t> dims(static_cast<size_t>(nd));
  if (nd > 0) LOOM_H5(H5Sget_simple_extent_dims(sp.get(), dims.data(), nullptr), path);
  return dims;
}

}  // namespace

std::vector<hsize_t> dataset_shape(hid_t file, const std::string& name, const std::string& path) {
  Handle ds = open_weights(file, name, path);
  return extent(ds.get(), path);
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
  Handle ds = open_weights(file, name, path);
  const std::vector<hsize_t> dims = extent(ds.get(), path);
  const bool two = dims.size() == 2, one = dims.size() == 1 && row0 == 0 && rows == 1;
  const hsize_t R = two ? dims[0] : 1, C = two ? dims[1] : one ? dims[0] : 0;
  if (!(two || one) || row0 > R || rows > R - row0 || col0 > C || cols > C - col0)
    throw UserError(str("HDF5 file '", path, "': dataset '", name, "' has ", dims.size(),
                        " dimensions (", R, "x", C, "); the block [", row0, ", ", row0 + rows,
                        ") x [", col0, ", ", col0 + cols, ") loom needs is not inside it"));
  Handle fsp(LOOM_H5(H5Dget_space(ds.get()), path), H5Sclose);
  if (two) {
    hsize_t start[2] = {row0, col0}, count[2] = {rows, cols};
    LOOM_H5(H5Sselect_hyperslab(fsp.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), path);
  } else {
    hsize_t start[1] = {col0}, count[1] = {cols};
    LOOM_H5(H5Sselect_hyperslab(fsp.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), path);
  }
  // Memory: a rows x ld array, selecting the first `cols` of each row.
  hsize_t mdims[2] = {rows, ld}, mstart[2] = {0, 0}, mcount[2] = {rows, cols};
  Handle msp(LOOM_H5(H5Screate_simple(2, mdims, nullptr), path), H5Sclose);
  LOOM_H5(H5Sselect_hyperslab(msp.get(), H5S_SELECT_SET, mstart, nullptr, mcount, nullptr), path);
  if (H5Dread(ds.get(), H5T_NATIVE_FLOAT, msp.get(), fsp.get(), H5P_DEFAULT, dst) < 0)
    throw UserError(str("HDF5 file '", path, "': reading dataset '", name, "' failed (",
                        last_error(),
                        "): the file is corrupt or needs an HDF5 filter not installed"));
}

}  // namespace loom::h5
