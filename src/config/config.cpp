// YAML -> Config: file reading, --set overrides on the YAML tree, strict typed conversion.
#include "config/config.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "config/config_text.h"
#include "config/did_you_mean.h"
#include "config/fields.h"
#include "core/check.h"

namespace loom {

namespace {

std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "'" + n.Scalar() + "'";
}

// "unknown key 'model.n_layers'; did you mean 'model.n_layer'?" (or the valid keys when no key
// is close). `scope` is the section ("" top level); `candidates` the keys valid there.
[[noreturn]] void unknown_key(const std::string& where, const std::string& scope,
                              const std::string& key, const std::vector<std::string>& candidates) {
  const std::string prefix = scope.empty() ? "" : scope + ".";
  std::string msg = where + ": unknown key '" + prefix + key + "'";
  std::string guess = closest_match(key, candidates);
  if (!guess.empty()) throw UserError(msg + "; did you mean '" + prefix + guess + "'?");
  // The right key in the wrong section: 'model.steps' -> 'train.steps', top-level 'n_layer'.
  if (scope.find('[') == std::string::npos) {
    for (const auto& f : config_fields()) {
      if (*f.section && f.section != scope && edit_distance(key, f.key) == 0)
        throw UserError(msg + "; did you mean '" + f.path() + "'?");
    }
  }
  if (scope.empty()) throw UserError(msg + "; valid top-level keys: " + join(candidates));
  throw UserError(msg + "; valid keys in '" + scope + "': " + join(candidates));
}

// Converts YAML nodes into Config members; errors name the source (the file, or --set for keys
// an override wrote), the key path, the value and the expected type.
class Converter {
 public:
  Converter(std::string source, std::set<std::string> overridden)
      : source_(std::move(source)), overridden_(std::move(overridden)) {}

  std::string where(const std::string& path) const {
    for (const auto& o : overridden_)
      if (path == o || path.rfind(o + ".", 0) == 0 || path.rfind(o + "[", 0) == 0) return "--set";
    return source_;
  }
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw UserError(where(path) + ": " + path + ": " + what);
  }
  [[noreturn]] void expected(const std::string& path, FieldKind kind, const YAML::Node& n) const {
    fail(path, std::string("expected ") + kind_name(kind) + ", got " + describe(n));
  }

  void convert_root(const YAML::Node& root, Config& cfg) const {
    if (!root.IsDefined() || root.IsNull()) return;
    if (!root.IsMap())
      throw UserError(source_ + ": expected a mapping of sections (" + join(top_level_names()) +
                      ") at the top level, got " + describe(root));
    std::set<std::string> seen;
    for (const auto& kv : root) {
      const std::string name = key_text(kv.first, "");
      if (!seen.insert(name).second) fail(name, "duplicate key");
      if (is_section(name)) {
        convert_section(name, kv.second, cfg);
      } else if (const Field* f = find_field("", name)) {
        convert_field(*f, kv.second, cfg);
      } else {
        unknown_key(where(name), "", name, top_level_names());
      }
    }
  }

 private:
  std::string key_text(const YAML::Node& k, const std::string& scope) const {
    if (!k.IsScalar()) fail(scope.empty() ? "(top level)" : scope, "keys must be plain names");
    return k.Scalar();
  }

  void convert_section(const std::string& section, const YAML::Node& node, Config& cfg) const {
    if (node.IsNull()) return;  // "model:" with nothing under it keeps the defaults
    if (!node.IsMap()) fail(section, "expected a mapping of keys, got " + describe(node));
    std::set<std::string> seen;
    for (const auto& kv : node) {
      const std::string key = key_text(kv.first, section);
      if (!seen.insert(key).second) fail(section + "." + key, "duplicate key");
      if (is_section(section + "." + key)) {  // a subsection: model.moe
        convert_section(section + "." + key, kv.second, cfg);
        continue;
      }
      const Field* f = find_field(section, key);
      if (!f) unknown_key(where(section + "." + key), section, key, section_keys(section));
      convert_field(*f, kv.second, cfg);
    }
  }

  void convert_field(const Field& f, const YAML::Node& n, Config& cfg) const {
    const std::string path = f.path();
    void* slot = f.slot(cfg);
    switch (f.kind) {
      case FieldKind::Int: *static_cast<int*>(slot) = to_int(path, n); break;
      case FieldKind::UInt64: *static_cast<uint64_t*>(slot) = to_u64(path, n); break;
      case FieldKind::Double: *static_cast<double*>(slot) = to_double(path, n); break;
      case FieldKind::Bool: *static_cast<bool*>(slot) = to_bool(path, n); break;
      case FieldKind::String: *static_cast<std::string*>(slot) = to_string(path, n); break;
      case FieldKind::IntList: *static_cast<std::vector<int>*>(slot) = to_int_list(path, n); break;
      case FieldKind::Sources:
        *static_cast<std::vector<DataSource>*>(slot) = to_sources(path, n);
        break;
    }
  }

  int to_int(const std::string& path, const YAML::Node& n) const {
    if (!n.IsScalar()) expected(path, FieldKind::Int, n);
    long long v = 0;
    double d = 0;
    const std::string& s = n.Scalar();
    // A float is accepted only when it is a whole number (1e3, 4.0): nothing is ever truncated.
    if (!parse_integer(s, v)) {
      if (!parse_number(s, d) || d != std::floor(d) || std::fabs(d) > 9.0e18)
        expected(path, FieldKind::Int, n);
      v = static_cast<long long>(d);
    }
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      fail(path, "expected an integer between " + std::to_string(std::numeric_limits<int>::min()) +
                     " and " + std::to_string(std::numeric_limits<int>::max()) + ", got " +
                     describe(n));
    return static_cast<int>(v);
  }

  uint64_t to_u64(const std::string& path, const YAML::Node& n) const {
    if (!n.IsScalar()) expected(path, FieldKind::UInt64, n);
    const std::string& s = n.Scalar();
    const std::string digits = (!s.empty() && s[0] == '+') ? s.substr(1) : s;
    bool ok = !digits.empty();
    for (char c : digits) ok = ok && c >= '0' && c <= '9';
    if (ok) {
      errno = 0;
      const unsigned long long v = std::strtoull(digits.c_str(), nullptr, 10);
      if (errno != ERANGE) return v;
    }
    double d = 0;
    if (parse_number(s, d) && d >= 0 && d == std::floor(d) && d < 9.0e15)
      return static_cast<uint64_t>(d);
    fail(path, "expected an integer between 0 and 18446744073709551615, got " + describe(n));
  }

  double to_double(const std::string& path, const YAML::Node& n) const {
    double d = 0;
    if (!n.IsScalar() || !parse_number(n.Scalar(), d)) expected(path, FieldKind::Double, n);
    return d;
  }

  bool to_bool(const std::string& path, const YAML::Node& n) const {
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
    }
    expected(path, FieldKind::Bool, n);
  }

  std::string to_string(const std::string& path, const YAML::Node& n) const {
    if (n.IsNull()) return "";
    if (!n.IsScalar()) expected(path, FieldKind::String, n);
    return n.Scalar();
  }

  std::vector<int> to_int_list(const std::string& path, const YAML::Node& n) const {
    if (n.IsNull()) return {};
    if (n.IsScalar()) return {to_int(path, n)};
    if (!n.IsSequence()) expected(path, FieldKind::IntList, n);
    std::vector<int> out;
    for (size_t i = 0; i < n.size(); ++i)
      out.push_back(to_int(path + "[" + std::to_string(i) + "]", n[i]));
    return out;
  }

  // data.train: "prefix" | [prefix, ...] | [{prefix: P, weight: W}, ...] (a mix is fine).
  std::vector<DataSource> to_sources(const std::string& path, const YAML::Node& n) const {
    if (n.IsNull()) return {};
    if (n.IsScalar() || n.IsMap()) return {to_source(path, n)};
    std::vector<DataSource> out;
    for (size_t i = 0; i < n.size(); ++i)
      out.push_back(to_source(path + "[" + std::to_string(i) + "]", n[i]));
    return out;
  }

  DataSource to_source(const std::string& path, const YAML::Node& n) const {
    DataSource src;
    if (n.IsScalar()) {
      src.prefix = n.Scalar();
      return src;
    }
    if (!n.IsMap()) expected(path, FieldKind::Sources, n);
    bool has_prefix = false;
    for (const auto& kv : n) {
      const std::string key = key_text(kv.first, path);
      if (key == "prefix") {
        src.prefix = to_string(path + ".prefix", kv.second);
        has_prefix = true;
      } else if (key == "weight") {
        src.weight = to_double(path + ".weight", kv.second);
      } else {
        unknown_key(where(path), path, key, {"prefix", "weight"});
      }
    }
    if (!has_prefix) fail(path, "missing 'prefix' (the PREFIX of PREFIX.bin/PREFIX.idx)");
    return src;
  }

  std::string source_;
  std::set<std::string> overridden_;
};

// Applies one "a.b=v" override to the tree; returns the key path it wrote.
std::string apply_override(YAML::Node& root, const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos)
    throw UserError("--set '" + text + "': expected KEY=VALUE, e.g. --set train.steps=100");
  const std::string path = text.substr(0, eq), value_text = text.substr(eq + 1);
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  if (path.empty() || path.back() == '.') parts.push_back("");
  for (const auto& p : parts)
    if (p.empty())
      throw UserError("--set '" + text + "': malformed key '" + path +
                      "'; expected section.key=VALUE, e.g. --set train.steps=100");
  const std::vector<std::string>& top = top_level_names();
  if (std::find(top.begin(), top.end(), parts[0]) == top.end())
    unknown_key("--set", "", parts[0], top);
  if (parts.size() > 1 && !is_section(parts[0]))
    throw UserError("--set: unknown key '" + path + "'; '" + parts[0] +
                    "' is a single value: use --set " + parts[0] + "=VALUE");
  // section.key, or section.subsection.key (model.moe.top_k).
  const bool sub = parts.size() == 3 && is_section(parts[0] + "." + parts[1]);
  if (parts.size() > 3 || (parts.size() == 3 && !sub))
    throw UserError("--set: unknown key '" + path + "'; keys have the form section.key (e.g. " +
                    "model.n_layer) or section.subsection.key (e.g. model.moe.top_k)");
  if (sub && !find_field(parts[0] + "." + parts[1], parts[2]))
    unknown_key("--set", parts[0] + "." + parts[1], parts[2],
                section_keys(parts[0] + "." + parts[1]));
  if (parts.size() == 2 && !find_field(parts[0], parts[1]))
    unknown_key("--set", parts[0], parts[1], section_keys(parts[0]));

  YAML::Node value;
  try {
    value = YAML::Load(value_text);
  } catch (const YAML::DeepRecursion&) {
    throw UserError("--set " + path + ": the value nests too deeply (configs nest 4 levels)");
  } catch (const YAML::ParserException& e) {
    throw UserError("--set " + path + ": cannot parse '" + value_text + "' as a YAML value: " +
                    e.msg);
  }
  // A missing top level or section is created; one of the wrong kind (a list, a scalar) is left
  // for the conversion to report rather than silently replaced.
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) return path;
  if (parts.size() == 1) {
    root[parts[0]] = value;
  } else {
    YAML::Node section = root[parts[0]];
    if (!section.IsDefined() || section.IsNull()) {
      root[parts[0]] = YAML::Node(YAML::NodeType::Map);
      section = root[parts[0]];
    }
    if (section.IsMap() && parts.size() == 2) section[parts[1]] = value;
    if (section.IsMap() && parts.size() == 3) {
      YAML::Node subsection = section[parts[1]];
      if (!subsection.IsDefined() || subsection.IsNull()) {
        section[parts[1]] = YAML::Node(YAML::NodeType::Map);
        subsection = section[parts[1]];
      }
      if (subsection.IsMap()) subsection[parts[2]] = value;
    }
  }
  return path;
}

Config convert(YAML::Node root, const std::vector<std::string>& overrides,
               const std::string& source) {
  std::set<std::string> overridden;
  for (const auto& o : overrides) overridden.insert(apply_override(root, o));
  Config cfg;
  Converter(source, overridden).convert_root(root, cfg);
  if (cfg.model.llama() && !root["model"]["tie_embeddings"].IsDefined())  // llama: untied
    cfg.model.tie_embeddings = false;  // unless the file or --set says otherwise
  cfg.source = source;
  return cfg;
}

YAML::Node load_yaml(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {  // yaml-cpp's guard; its message says "bad file"
    throw UserError(str(source, ":", e.mark.line + 1, ":", e.mark.column + 1,
                        ": YAML nested too deeply (a loom config nests at most 4 levels)"));
  } catch (const YAML::ParserException& e) {
    throw UserError(str(source, ":", e.mark.line + 1, ":", e.mark.column + 1,
                        ": YAML syntax error: ", e.msg));
  }
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::vector<std::string>& overrides,
                    const std::string& source) {
  return convert(load_yaml(yaml_text, source), overrides, source);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError("cannot read config file '" + path + "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("cannot read config file '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UserError("cannot read config file '" + path + "': read error");
  return parse_config(text.str(), overrides, path);
}

}  // namespace loom
