// Command-line arguments of the loom executable: a command, operands, --set overrides and
// --name value options, each validated by the command that reads it.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace loom::cli {

struct Args {
  std::string command;
  std::vector<std::string> operands;   // positional arguments after the command
  std::vector<std::string> overrides;  // --set key.path=value, in order
  std::map<std::string, std::string> options;  // --name value
  bool help = false;
};

// Options that take a value; anything else starting with '-' is an error.
Args parse_args(int argc, char** argv);

// Typed access with one clear error naming the option.
std::string option(const Args& a, const std::string& name, const std::string& fallback);
int option_int(const Args& a, const std::string& name, int fallback);
double option_double(const Args& a, const std::string& name, double fallback);

}  // namespace loom::cli
