// Structure-aware HDF5 files for fuzzing: the fuzz bytes choose which objects a well-formed file
// holds (datasets of any shape, type and storage, groups, links, attributes), so the fuzzer tests
// loom's checks of what it reads rather than libhdf5's parsing of raw bytes.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::fuzz {

// A dataset name loom looks for and the shape it expects there.
struct H5Expect {
  std::string name;
  std::vector<uint64_t> dims;
};

// Writes `path` from the program in `bytes`: each operation picks a name (mostly from `names`),
// a shape (mostly the expected one or a near miss), a type and a storage layout. Operations that
// libhdf5 refuses are skipped; the file is always a valid HDF5 file. Deterministic: the same
// bytes give the same file (no timestamps).
void build_h5(const std::string& path, std::string_view bytes, const std::vector<H5Expect>& names);

// The program that writes every name with its expected shape as float32 (a valid file; seeds).
std::string h5_valid_program(const std::vector<H5Expect>& names);

}  // namespace loom::fuzz
