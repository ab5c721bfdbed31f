// Strict reading of cluster files: every key known, present, numeric and positive.
#include "plan/cluster.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "config/did_you_mean.h"
#include "core/check.h"

namespace loom::plan {

namespace {

const std::vector<std::string> kTopKeys = {
    "name",       "device",       "nodes",      "gpus_per_node", "gpu_memory_gib",
    "peak_flops", "efficiency", "reserved_gib", "intra_node",    "inter_node"};
const std::vector<std::string> kLinkKeys = {"bandwidth_gbps", "latency_us"};

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw UserError(str("cluster file ", source_, ": ", key, ": ", what));
  }

  void check_keys(const YAML::Node& map, const std::vector<std::string>& known,
                  const std::string& scope) const {
    for (const auto& kv : map) {
      const std::string k = kv.first.IsScalar() ? kv.first.Scalar() : "?";
      bool ok = false;
      for (const auto& c : known) ok = ok || c == k;
      if (ok) continue;
      std::string msg = "unknown key; known keys are " + join(known);
      const std::string guess = closest_match(k, known);
      if (!guess.empty()) msg += " (did you mean '" + scope + guess + "'?)";
      fail(scope + k, msg);
    }
  }

  // A required (or optional, when fallback >= 0) number > 0 (>= 0 when allow_zero).
  double number(const YAML::Node& map, const std::string& key, const std::string& scope,
                const char* example, double fallback = -1, bool allow_zero = false) const {
    const YAML::Node n = map[key];
    if (!n.IsDefined() || n.IsNull()) {
      if (fallback >= 0) return fallback;
      fail(scope + key, str("missing; set it, e.g. ", scope + key, ": ", example));
    }
    const std::string text = n.IsScalar() ? n.Scalar() : std::string("a non-scalar");
    char* end = nullptr;
    errno = 0;
    double v = n.IsScalar() ? std::strtod(text.c_str(), &end) : NAN;
    if (!n.IsScalar() || text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
      fail(scope + key, str("expected a number, got '", text, "'; e.g. ", example));
    if (!(v > 0) && !(allow_zero && v == 0))
      fail(scope + key, str(text, " must be ", allow_zero ? ">= 0" : "> 0", "; e.g. ", example));
    return v;
  }

  int integer(const YAML::Node& map, const std::string& key, const char* example) const {
    double v = number(map, key, "", example);
    if (v != std::floor(v) || v > 1e9)
      fail(key, str(map[key].Scalar(), " must be a whole number; e.g. ", example));
    return int(v);
  }

  LinkSpec link(const YAML::Node& root, const std::string& key, const char* bw_example,
                const char* lat_example) const {
    const YAML::Node n = root[key];
    if (!n.IsDefined() || n.IsNull())
      fail(key, str("missing; set it, e.g. ", key, ": {bandwidth_gbps: ", bw_example,
                    ", latency_us: ", lat_example, "}"));
    if (!n.IsMap())
      fail(key, "expected a mapping {bandwidth_gbps: Gbit/s per GPU, latency_us: microseconds}");
    const std::string scope = key + ".";
    check_keys(n, kLinkKeys, scope);
    LinkSpec l;
    l.bandwidth_gbps = number(n, "bandwidth_gbps", scope, bw_example);
    l.latency_us = number(n, "latency_us", scope, lat_example);
    return l;
  }

 private:
  std::string source_;
};

}  // namespace

ClusterSpec parse_cluster(const std::string& yaml_text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw UserError(str("cluster file ", source, ":", e.mark.line + 1, ":", e.mark.column + 1,
                        ": YAML syntax error: ", e.msg));
  }
  Reader r(source);
  if (!root.IsMap())
    throw UserError(str("cluster file ", source, ": expected a mapping of keys (nodes, ",
                        "gpus_per_node, gpu_memory_gib, peak_flops, intra_node, inter_node)"));
  r.check_keys(root, kTopKeys, "");
  ClusterSpec c;
  c.source = source;
  const YAML::Node name = root["name"];
  if (name.IsDefined() && !name.IsNull()) {
    if (!name.IsScalar()) r.fail("name", "expected a string, e.g. name: dgx-h100");
    c.name = name.Scalar();
  } else {
    c.name = std::filesystem::path(source).stem().string();
  }
  const YAML::Node device = root["device"];
  if (device.IsDefined() && !device.IsNull()) {
    c.device = device.IsScalar() ? device.Scalar() : "";
    if (c.device != "cuda" && c.device != "cpu")
      r.fail("device", str("'", c.device, "' is not valid; choose cuda or cpu"));
  }
  c.nodes = r.integer(root, "nodes", "1");
  c.gpus_per_node = r.integer(root, "gpus_per_node", "8");
  c.gpu_memory_gib = r.number(root, "gpu_memory_gib", "", "80");
  c.peak_flops = r.number(root, "peak_flops", "", "989e12");
  c.efficiency = r.number(root, "efficiency", "", "0.5", 0.5);
  if (c.efficiency > 1) r.fail("efficiency", str(c.efficiency, " must be <= 1; e.g. 0.5"));
  c.reserved_gib = r.number(root, "reserved_gib", "", "2", 0.0, true);
  if (c.reserved_gib >= c.gpu_memory_gib)
    r.fail("reserved_gib", str(c.reserved_gib, " must be less than gpu_memory_gib=",
                               c.gpu_memory_gib));
  if (double(c.nodes) * c.gpus_per_node > 1e7)
    r.fail("nodes", str(c.nodes, " x gpus_per_node ", c.gpus_per_node, " is too many devices"));
  c.intra_node = r.link(root, "intra_node", "3600", "2");
  c.inter_node = r.link(root, "inter_node", "400", "5");
  return c;
}

ClusterSpec load_cluster(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError("cannot read cluster file '" + path + "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("cannot read cluster file '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_cluster(text.str(), path);
}

std::string describe(const ClusterSpec& c) {
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "%s (%s): %d node%s x %d devices = %d, %.4g GiB each (%.3g reserved), peak %.4g "
                "TFLOP/s x efficiency %.2f; intra-node %.4g Gb/s %.3g us, inter-node %.4g Gb/s "
                "%.3g us per device",
                c.name.c_str(), c.device.c_str(), c.nodes, c.nodes == 1 ? "" : "s",
                c.gpus_per_node, c.world(),
                c.gpu_memory_gib, c.reserved_gib, c.peak_flops / 1e12, c.efficiency,
                c.intra_node.bandwidth_gbps, c.intra_node.latency_us,
                c.inter_node.bandwidth_gbps, c.inter_node.latency_us);
  return buf;
}

}  // namespace loom::plan
