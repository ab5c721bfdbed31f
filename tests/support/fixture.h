// Test support: reading reference fixtures (HDF5) and comparing arrays with stated tolerances.
#pragma once
#include <string>
#include <vector>

namespace loom::test {

std::string source_path(const std::string& rel);  // LOOM_SOURCE_DIR/rel

// Whole dataset as doubles (any numeric type), and its shape.
std::vector<double> read_h5(const std::string& file, const std::string& name,
                            std::vector<size_t>* shape = nullptr);
std::vector<int> read_h5_int(const std::string& file, const std::string& name);
double read_h5_attr(const std::string& file, const std::string& attr);

// ||a - b|| / ||b|| (b is the reference).
double rel_error(const float* a, const std::vector<double>& b);
double rel_error(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace loom::test
