// Parsing of loom's command line.
#include "cli/args.h"

#include <cstdlib>
#include <set>

#include "core/check.h"

namespace loom::cli {

namespace {
const std::set<std::string> kValued = {
    "--checkpoint",      "--prompt",       "--max-tokens",    "--temperature",
    "--top-k",           "--seed",         "--cluster",       "--gpu-flops",
    "--attention-flops", "--vector-flops", "--gpu-bandwidth", "--launch-us",
    "--ranks",           "--prompts",      "--top-p",         "--stop",
    "--batch",           "--host",         "--port"};
const std::set<std::string> kFlags = {"--json", "--kernels", "--layout-args", "--no-cache"};
}  // namespace

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    std::string value;
    size_t eq = s.find('=');
    std::string name = s.rfind("--", 0) == 0 && eq != std::string::npos ? s.substr(0, eq) : s;
    if (s == "-h" || s == "--help") {
      a.help = true;
    } else if (kFlags.count(s)) {
      a.options[s] = "1";
    } else if (name == "--set" || kValued.count(name)) {
      if (eq != std::string::npos && name == s.substr(0, eq))
        value = s.substr(eq + 1);
      else if (i + 1 < argc)
        value = argv[++i];
      else
        throw UserError(str(name, " needs a value; see loom --help"));
      if (name == "--set") {
        if (value.find('=') == std::string::npos)
          throw UserError(
              str("--set needs key.path=value, e.g. --set train.steps=100; got '", value, "'"));
        a.overrides.push_back(value);
      } else {
        a.options[name] = value;
      }
    } else if (s.rfind("-", 0) == 0 && s.size() > 1) {
      throw UserError(str("unknown option '", s, "'; see loom --help"));
    } else if (a.command.empty()) {
      a.command = s;
    } else {
      a.operands.push_back(s);
    }
  }
  return a;
}

std::string option(const Args& a, const std::string& name, const std::string& fallback) {
  auto it = a.options.find(name);
  return it == a.options.end() ? fallback : it->second;
}

int option_int(const Args& a, const std::string& name, int fallback) {
  std::string v = option(a, name, "");
  if (v.empty()) return fallback;
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (*end != '\0' || x < 0 || x > 1000000000)
    throw UserError(str(name, ": expected a non-negative integer, got '", v, "'"));
  return int(x);
}

double option_double(const Args& a, const std::string& name, double fallback) {
  std::string v = option(a, name, "");
  if (v.empty()) return fallback;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (*end != '\0' || !(x >= 0))
    throw UserError(str(name, ": expected a number >= 0, got '", v, "'"));
  return x;
}

}  // namespace loom::cli
