// The structure-aware HDF5 writer of the fuzz targets (see h5_builder.h).
#include "tests/fuzz/h5_builder.h"

#include <hdf5.h>

#include <algorithm>

#include "tests/fuzz/fuzz_util.h"

namespace loom::fuzz {

namespace {

// Closes an HDF5 id with the given function when it goes out of scope (ids < 0 are ignored).
struct Id {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Id() {
    if (id >= 0) close(id);
  }
};

const std::vector<std::string> kExtraNames = {"x", "g", "g/x", "param", "param/x/0", "h.0"};
const hsize_t kDimTable[] = {0, 1, 2, 3, 16, 97, 128, hsize_t(1) << 31, hsize_t(1) << 40};

std::string pick_name(ByteReader& in, const std::vector<H5Expect>& names, size_t* index) {
  const size_t b = in.u8();
  *index = b < names.size() ? b : names.size();
  if (b < names.size()) return names[b].name;
  return kExtraNames[(b - names.size()) % kExtraNames.size()];
}

// A dataspace: the expected shape (often), a near miss, another rank, scalar, null or random.
hid_t pick_space(ByteReader& in, const std::vector<hsize_t>& want, bool unlimited) {
  std::vector<hsize_t> d = want;
  switch (in.u8() % 9) {
    case 4:
      if (!d.empty()) {
        hsize_t& x = d[in.u8() % d.size()];
        x = (in.u8() & 1) ? x + 1 : (x > 0 ? x - 1 : 1);
      }
      break;
    case 5:
      if (in.u8() & 1 || d.empty())
        d.push_back(1);
      else
        d.pop_back();
      break;
    case 6:
      return H5Screate(H5S_SCALAR);
    case 7:
      return H5Screate(H5S_NULL);
    case 8:
      d.assign(in.u8() % 4, 0);
      for (hsize_t& x : d) x = kDimTable[in.u8() % (sizeof kDimTable / sizeof kDimTable[0])];
      break;
    default:
      break;
  }
  if (d.empty()) return H5Screate(H5S_SCALAR);
  std::vector<hsize_t> maxd(d.size(), H5S_UNLIMITED);
  return H5Screate_simple(int(d.size()), d.data(), unlimited ? maxd.data() : nullptr);
}

// A file type: mostly float32, else another float, integers, strings, compound, vlen, array.
hid_t pick_type(ByteReader& in, bool* numeric) {
  *numeric = true;
  switch (in.u8() % 14) {
    case 4:
      return H5Tcopy(H5T_IEEE_F64LE);
    case 5:
      return H5Tcopy(H5T_IEEE_F32BE);
    case 6:
      return H5Tcopy(H5T_STD_I32LE);
    case 7:
      return H5Tcopy(H5T_STD_U8LE);
    case 8: {  // IEEE half precision, described field by field
      hid_t t = H5Tcopy(H5T_IEEE_F32LE);
      H5Tset_fields(t, 15, 10, 5, 0, 10);
      H5Tset_size(t, 2);
      H5Tset_ebias(t, 15);
      return t;
    }
    case 9: {
      *numeric = false;
      hid_t t = H5Tcopy(H5T_C_S1);
      H5Tset_size(t, 8);
      return t;
    }
    case 10: {
      *numeric = false;
      hid_t t = H5Tcreate(H5T_COMPOUND, 8);
      H5Tinsert(t, "a", 0, H5T_IEEE_F32LE);
      H5Tinsert(t, "b", 4, H5T_STD_I32LE);
      return t;
    }
    case 11:
      *numeric = false;
      return H5Tvlen_create(H5T_IEEE_F32LE);
    case 12: {
      *numeric = false;
      hsize_t two = 2;
      return H5Tarray_create2(H5T_IEEE_F32LE, 1, &two);
    }
    case 13:
      *numeric = false;
      return H5Tcreate(H5T_OPAQUE, 4);
    default:
      return H5Tcopy(H5T_IEEE_F32LE);
  }
}

void add_dataset(hid_t file, hid_t lcpl, ByteReader& in, const std::vector<H5Expect>& names) {
  size_t idx;
  const std::string name = pick_name(in, names, &idx);
  std::vector<hsize_t> want;
  if (idx < names.size()) want.assign(names[idx].dims.begin(), names[idx].dims.end());
  const int layout = in.u8() % 6;  // 0-1 contiguous, 2 chunked, 3 chunked+deflate, 4 compact,
                                   // 5 external raw data file
  Id space{pick_space(in, want, layout == 2 || layout == 3), H5Sclose};
  bool numeric;
  Id type{pick_type(in, &numeric), H5Tclose};
  const uint8_t fill = in.u8();
  if (space.id < 0 || type.id < 0) return;
  Id dcpl{H5Pcreate(H5P_DATASET_CREATE), H5Pclose};
  H5Pset_obj_track_times(dcpl.id, 0);
  const int rank = H5Sget_simple_extent_ndims(space.id);
  if ((layout == 2 || layout == 3) && rank > 0) {
    std::vector<hsize_t> dims(static_cast<size_t>(rank)), chunk(dims.size());
    H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
    for (int i = 0; i < rank; ++i) chunk[size_t(i)] = std::clamp<hsize_t>(dims[size_t(i)], 1, 4);
    H5Pset_chunk(dcpl.id, rank, chunk.data());
    if (layout == 3) H5Pset_deflate(dcpl.id, 1);
  } else if (layout == 4) {
    H5Pset_layout(dcpl.id, H5D_COMPACT);
  } else if (layout == 5) {
    H5Pset_external(dcpl.id, "loom_fuzz_missing_raw_data.bin", 0, H5F_UNLIMITED);
  }
  Id ds{H5Dcreate2(file, name.c_str(), type.id, space.id, lcpl, dcpl.id, H5P_DEFAULT), H5Dclose};
  if (ds.id < 0 || !numeric || layout == 5) return;
  const hssize_t n = H5Sget_select_npoints(space.id);
  if (n <= 0 || n > (hssize_t(1) << 16)) return;  // large ones stay unwritten (fill value)
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(int(i % 251) - 125 + fill) / 64.0;
  H5Dwrite(ds.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
}

}  // namespace

void build_h5(const std::string& path, std::string_view bytes, const std::vector<H5Expect>& names) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  Id file{H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose};
  if (file.id < 0) return;
  Id lcpl{H5Pcreate(H5P_LINK_CREATE), H5Pclose};
  H5Pset_create_intermediate_group(lcpl.id, 1);
  Id gcpl{H5Pcreate(H5P_GROUP_CREATE), H5Pclose};
  H5Pset_obj_track_times(gcpl.id, 0);
  ByteReader in(bytes);
  size_t idx;
  for (int ops = 0; ops < 256 && !in.done(); ++ops) {
    switch (in.u8() % 8) {
      case 3: {  // a group where a dataset may be expected
        Id g{H5Gcreate2(file.id, pick_name(in, names, &idx).c_str(), lcpl.id, gcpl.id, H5P_DEFAULT),
             H5Gclose};
        break;
      }
      case 4: {  // a soft link, possibly dangling or part of a cycle
        const std::string from = pick_name(in, names, &idx), to = pick_name(in, names, &idx);
        H5Lcreate_soft(to.c_str(), file.id, from.c_str(), lcpl.id, H5P_DEFAULT);
        break;
      }
      case 5:  // an external link to a file that does not exist
        H5Lcreate_external("loom_fuzz_missing.h5", "/x", file.id,
                           pick_name(in, names, &idx).c_str(), lcpl.id, H5P_DEFAULT);
        break;
      case 6: {  // an attribute on the root group
        Id space{H5Screate(H5S_SCALAR), H5Sclose};
        const std::string name = "attr" + std::to_string(in.u8() % 4);
        Id a{H5Acreate2(file.id, name.c_str(), H5T_IEEE_F32LE, space.id, H5P_DEFAULT, H5P_DEFAULT),
             H5Aclose};
        const float v = float(in.u8());
        if (a.id >= 0) H5Awrite(a.id, H5T_NATIVE_FLOAT, &v);
        break;
      }
      case 7: {  // a second name for an existing object
        const std::string from = pick_name(in, names, &idx), to = pick_name(in, names, &idx);
        H5Lcreate_hard(file.id, to.c_str(), file.id, from.c_str(), lcpl.id, H5P_DEFAULT);
        break;
      }
      default:
        add_dataset(file.id, lcpl.id, in, names);
    }
  }
}

std::string h5_valid_program(const std::vector<H5Expect>& names) {
  std::string p;
  for (size_t i = 0; i < names.size() && i < 256; ++i) {
    // dataset op, name i, contiguous, expected shape, float32, fill byte
    const char op[] = {0, char(i), 0, 0, 0, char(i * 7)};
    p.append(op, sizeof op);
  }
  return p;
}

}  // namespace loom::fuzz
