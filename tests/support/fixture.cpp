// HDF5 fixture reading and error norms for tests.
#include "tests/support/fixture.h"

#include <hdf5.h>

#include <cmath>
#include <stdexcept>

namespace loom::test {

std::string source_path(const std::string& rel) { return std::string(LOOM_SOURCE_DIR) + "/" + rel; }

namespace {
hid_t open_file(const std::string& file) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw std::runtime_error("cannot open fixture " + file);
  return f;
}
}  // namespace

std::vector<double> read_h5(const std::string& file, const std::string& name,
                            std::vector<size_t>* shape) {
  hid_t f = open_file(file);
  hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  if (d < 0) {
    H5Fclose(f);
    throw std::runtime_error("fixture " + file + " has no dataset " + name);
  }
  hid_t sp = H5Dget_space(d);
  int nd = H5Sget_simple_extent_ndims(sp);
  std::vector<hsize_t> dims(static_cast<size_t>(nd > 0 ? nd : 0));
  if (nd > 0) H5Sget_simple_extent_dims(sp, dims.data(), nullptr);
  size_t n = 1;
  for (hsize_t v : dims) n *= size_t(v);
  if (shape) shape->assign(dims.begin(), dims.end());
  std::vector<double> out(n);
  H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
  H5Sclose(sp);
  H5Dclose(d);
  H5Fclose(f);
  return out;
}

std::vector<int> read_h5_int(const std::string& file, const std::string& name) {
  std::vector<double> v = read_h5(file, name);
  return std::vector<int>(v.begin(), v.end());
}

double read_h5_attr(const std::string& file, const std::string& attr) {
  hid_t f = open_file(file);
  hid_t a = H5Aopen_by_name(f, ".", attr.c_str(), H5P_DEFAULT, H5P_DEFAULT);
  if (a < 0) {
    H5Fclose(f);
    throw std::runtime_error("fixture " + file + " has no attribute " + attr);
  }
  double v = 0;
  H5Aread(a, H5T_NATIVE_DOUBLE, &v);
  H5Aclose(a);
  H5Fclose(f);
  return v;
}

double rel_error(const float* a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

}  // namespace loom::test
