// Config -> YAML text (to_yaml), and the scalar parsing the reader shares.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "config/config.h"
#include "config/config_text.h"
#include "config/fields.h"

namespace loom {

bool parse_integer(const std::string& s, long long& out) {
  if (s.empty()) return false;
  size_t i = (s[0] == '+' || s[0] == '-') ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t j = i; j < s.size(); ++j)
    if (s[j] < '0' || s[j] > '9') return false;
  errno = 0;
  out = std::strtoll(s.c_str(), nullptr, 10);
  return errno != ERANGE;
}

bool parse_number(const std::string& s, double& out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(out);
}

namespace {

// Writes a string so that any YAML reader reads it back as a string: text that a reader would
// take for a bool, a null or a number ("true", "~", "1e3") is quoted.
void emit_string(YAML::Emitter& out, const std::string& s) {
  std::string l = s;
  for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  long long i = 0;
  double d = 0;
  const bool special = l == "true" || l == "false" || l == "yes" || l == "no" || l == "on" ||
                       l == "off" || l == "y" || l == "n" || l == "null" || l == "~" ||
                       l == ".inf" || l == "-.inf" || l == ".nan" || parse_integer(s, i) ||
                       parse_number(s, d);
  if (special) out << YAML::DoubleQuoted;
  out << s;
}

}  // namespace

std::string to_yaml(const Config& cfg_in) {
  Config cfg = cfg_in;  // the field slots take a mutable Config
  YAML::Emitter out;
  out.SetBoolFormat(YAML::TrueFalseBool);
  out << YAML::BeginMap;
  // The open mappings: a section ("model") and within it a subsection ("model.moe").
  std::string open;
  auto depth = [](const std::string& s) {
    return s.empty() ? 0 : 1 + int(std::count(s.begin(), s.end(), '.'));
  };
  for (const Field& f : config_fields()) {
    if (open != f.section) {
      const std::string next = f.section;
      // Close until `open` is a prefix of the next section, then open the rest.
      while (!open.empty() && next.rfind(open + ".", 0) != 0) {
        out << YAML::EndMap;
        const size_t dot = open.rfind('.');
        open = dot == std::string::npos ? "" : open.substr(0, dot);
      }
      while (depth(open) < depth(next)) {
        const size_t from = open.empty() ? 0 : open.size() + 1;
        const size_t dot = next.find('.', from);
        const std::string part =
            next.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
        out << YAML::Key << part << YAML::Value << YAML::BeginMap;
        open = next.substr(0, dot == std::string::npos ? next.size() : dot);
      }
    }
    out << YAML::Key << f.key << YAML::Value;
    const void* slot = f.slot(cfg);
    switch (f.kind) {
      case FieldKind::Int:
        out << *static_cast<const int*>(slot);
        break;
      case FieldKind::UInt64:
        out << std::to_string(*static_cast<const uint64_t*>(slot));
        break;
      case FieldKind::Double:
        out << format_double(*static_cast<const double*>(slot));
        break;
      case FieldKind::Bool:
        out << *static_cast<const bool*>(slot);
        break;
      case FieldKind::String:
        emit_string(out, *static_cast<const std::string*>(slot));
        break;
      case FieldKind::IntList:
        out << YAML::Flow << *static_cast<const std::vector<int>*>(slot);
        break;
      case FieldKind::Sources: {
        const auto& sources = *static_cast<const std::vector<DataSource>*>(slot);
        out << (sources.empty() ? YAML::Flow : YAML::Block) << YAML::BeginSeq;
        for (const auto& s : sources) {
          out << YAML::Flow << YAML::BeginMap << YAML::Key << "prefix" << YAML::Value;
          emit_string(out, s.prefix);
          out << YAML::Key << "weight" << YAML::Value << format_double(s.weight) << YAML::EndMap;
        }
        out << YAML::EndSeq;
        break;
      }
    }
  }
  for (int d = depth(open); d > 0; --d) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace loom
