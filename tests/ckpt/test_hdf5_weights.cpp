// HDF5 weight files: a missing name is reported as missing, an unreadable one as unreadable.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt/canonical.h"
#include "ckpt/hdf5_util.h"
#include "core/check.h"
#include "tests/support/configs.h"
#include "tests/support/fixture.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

std::string temp_file(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("loom_h5w_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

// The file offset of the object header that `name` links to.
haddr_t header_address(const std::string& path, const std::string& name) {
  h5::Handle f = h5::open_read(path, "test file");
  H5O_info_t info;
  EXPECT_GE(H5Oget_info_by_name(f.get(), name.c_str(), &info, H5P_DEFAULT), 0);
  return info.addr;
}

// Lookups through groups: missing names, groups and datasets on the way are "no", not errors.
TEST(Hdf5Weights, MissingNamesAndOtherObjectsAreNotDatasets) {
  const std::string path = temp_file("names.h5");
  {
    h5::Handle f = h5::create(path);
    const float v[2] = {1, 2};
    h5::write_f32(f.get(), "wte.weight", {2}, v, path);
    h5::write_f32_2d(f.get(), "param/x/0", 1, 2, v, path);
  }
  h5::Handle f = h5::open_read(path, "test file");
  EXPECT_TRUE(h5::has_dataset(f.get(), "wte.weight", path));
  EXPECT_TRUE(h5::has_dataset(f.get(), "param/x/0", path));
  EXPECT_FALSE(h5::has_dataset(f.get(), "wpe.weight", path));
  EXPECT_FALSE(h5::has_dataset(f.get(), "param/y/0", path));     // a missing group on the way
  EXPECT_FALSE(h5::has_dataset(f.get(), "param/x", path));       // a group
  EXPECT_FALSE(h5::has_dataset(f.get(), "wte.weight/0", path));  // a dataset on the way
  fs::remove_all(fs::path(path).parent_path());
}

// A tensor whose link is intact but whose object header is corrupt is unreadable, not missing:
// the error names the file and the tensor and says the file is corrupt.
TEST(Hdf5Weights, CorruptObjectHeaderIsReportedAsUnreadable) {
  const std::string path = temp_file("corrupt.h5");
  fs::copy_file(test::source_path("tests/reference/fixtures/gpt2_tiny_weights.h5"), path,
                fs::copy_options::overwrite_existing);
  const haddr_t at = header_address(path, "wte.weight");
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(std::streamoff(at));
    f.write("\xff\xff\xff\xff", 4);  // the header's version (v1) or signature (v2)
    ASSERT_TRUE(f.good());
  }
  ParamLayout L(test::fixture_model(), 1, 0, 1, 0);
  std::vector<float> params(L.total());
  try {
    load_canonical(path, L, params.data());
    ADD_FAILURE() << "a corrupt object header was loaded";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("'wte.weight' cannot be read ("), std::string::npos) << msg;
    EXPECT_NE(msg.find("corrupt"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("missing"), std::string::npos) << msg;
  }
  fs::remove_all(fs::path(path).parent_path());
}

}  // namespace
}  // namespace loom
