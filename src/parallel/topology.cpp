// Topology decisions from the per-rank host names: TP groups across nodes, GPUs, the rank map.
#include "parallel/topology.h"

#include <algorithm>
#include <map>

#include "core/check.h"

namespace loom {

namespace {

struct HostRanks {
  std::string host;
  std::vector<int> ranks;  // ascending
};

// Hosts in order of their first rank, each with its ranks.
std::vector<HostRanks> by_host(const std::vector<std::string>& hosts) {
  std::vector<HostRanks> out;
  std::map<std::string, size_t> index;
  for (int r = 0; r < int(hosts.size()); ++r) {
    auto it = index.find(hosts[size_t(r)]);
    if (it == index.end()) {
      it = index.emplace(hosts[size_t(r)], out.size()).first;
      out.push_back({hosts[size_t(r)], {}});
    }
    out[it->second].ranks.push_back(r);
  }
  return out;
}

std::string lpad(const std::string& s, size_t w) {
  return s.size() >= w ? s : std::string(w - s.size(), ' ') + s;
}

std::string rpad(const std::string& s, size_t w) {
  return s.size() >= w ? s.substr(0, w) : s + std::string(w - s.size(), ' ');
}

size_t digits(int v) { return std::to_string(v).size(); }

}  // namespace

std::string int_ranges(const std::vector<int>& r) {
  std::string out;
  for (size_t i = 0; i < r.size();) {
    size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(r[i]);
    if (j > i) out += "-" + std::to_string(r[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> node_local_ranks(const std::vector<std::string>& hosts) {
  std::vector<int> local(hosts.size());
  for (const HostRanks& h : by_host(hosts))
    for (size_t i = 0; i < h.ranks.size(); ++i) local[size_t(h.ranks[i])] = int(i);
  return local;
}

std::vector<std::vector<int>> tp_groups_crossing_nodes(const Grid& grid,
                                                       const std::vector<std::string>& hosts) {
  LOOM_CHECK(int(hosts.size()) == grid.size(), hosts.size(), " hosts for a grid of ", grid.size());
  std::vector<std::vector<int>> out;
  for (int r = 0; r < grid.size(); ++r) {
    if (grid.coord_of(r).tp != 0) continue;
    std::vector<int> group = grid.group_ranks(Axis::TP, r);
    for (int m : group)
      if (hosts[size_t(m)] != hosts[size_t(group[0])]) {
        out.push_back(group);
        break;
      }
  }
  return out;
}

std::string tp_crossing_message(const Grid& grid, const std::vector<std::string>& hosts,
                                const std::vector<std::vector<int>>& crossing, bool strict) {
  LOOM_CHECK(!crossing.empty(), "no crossing tensor-parallel group to describe");
  const int tp = grid.size(Axis::TP);
  std::vector<int> example = crossing[0];
  std::vector<std::string> example_hosts;
  for (int r : example)
    if (std::find(example_hosts.begin(), example_hosts.end(), hosts[size_t(r)]) ==
        example_hosts.end())
      example_hosts.push_back(hosts[size_t(r)]);
  std::sort(example.begin(), example.end());
  size_t fewest = hosts.size(), most = 0;
  for (const HostRanks& h : by_host(hosts)) {
    fewest = std::min(fewest, h.ranks.size());
    most = std::max(most, h.ranks.size());
  }
  std::string host_list;
  for (size_t i = 0; i < example_hosts.size() && i < 4; ++i)
    host_list += (i ? ", " : "") + example_hosts[i];
  if (example_hosts.size() > 4) host_list += ", ...";
  const std::string per_node = fewest == most
                                   ? plural(long(most), "rank per node", "ranks per node")
                                   : str(fewest, " to ", most, " ranks per node");
  std::string what =
      str(crossing.size(), " of ", grid.size() / tp,
          grid.size() / tp == 1 ? " tensor-parallel group spans" : " tensor-parallel groups span",
          " nodes (parallel.tp=", tp, ", e.g. ranks ", int_ranges(example), " on hosts ", host_list,
          "; ", per_node, ")");
  std::vector<std::string> fixes;
  if (grid.order()[0] != Axis::TP)
    fixes.push_back(str("start parallel.order with tp (e.g. tp-dp-pp, not ", order_text(grid),
                        ") so that a TP group takes consecutive ranks"));
  if (size_t(tp) > most)
    fixes.push_back(str("lower parallel.tp to at most ", most, ", the ranks per node"));
  else if (grid.order()[0] == Axis::TP)
    fixes.push_back(
        str("run the same number of ranks on every node, a multiple of parallel.tp=", tp));
  std::string fix;
  for (size_t i = 0; i < fixes.size(); ++i) fix += (i ? ", and " : "") + fixes[i];
  if (strict)
    return str("parallel.strict_topology: ", what,
               ", so its all-reduces would cross the network: ", fix,
               " (or set parallel.strict_topology: false to run anyway)");
  return str(what, "; tensor-parallel all-reduces will cross the network: ", fix,
             " (parallel.strict_topology: true makes this an error)");
}

std::vector<int> assign_gpus(const std::vector<std::string>& hosts,
                             const std::vector<std::vector<std::string>>& visible, bool share) {
  LOOM_CHECK(hosts.size() == visible.size(), hosts.size(), " hosts but ", visible.size(),
             " GPU lists");
  for (size_t r = 0; r < visible.size(); ++r)
    if (visible[r].empty())
      throw UserError(str("rank ", r, " on host ", hosts[r],
                          " sees no GPU: check CUDA_VISIBLE_DEVICES and the job's GPU request "
                          "(e.g. srun --gpus-per-node=8), or set device: cpu"));
  std::vector<int> gpu(hosts.size(), -1);
  for (const HostRanks& h : by_host(hosts)) {
    // Ranks that see the same GPUs share them, in world rank order.
    std::vector<std::pair<const std::vector<std::string>*, std::vector<int>>> groups;
    for (int r : h.ranks) {
      const std::vector<std::string>& list = visible[size_t(r)];
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const auto& g) { return *g.first == list; });
      if (it == groups.end()) it = groups.insert(groups.end(), {&list, {}});
      it->second.push_back(r);
    }
    for (const auto& [list, ranks] : groups) {
      const size_t n = list->size();
      if (share) {
        for (size_t i = 0; i < ranks.size(); ++i) gpu[size_t(ranks[i])] = int(i % n);
        continue;
      }
      if (ranks.size() > n)
        throw UserError(str(
            ranks.size(), " ranks on host ", h.host, " (world ranks ", int_ranges(ranks), ") but ",
            plural(long(n), "GPU", "GPUs"), ": launch ", n, n == 1 ? " task" : " tasks",
            " per node (mpirun --map-by ppr:", n, ":node, srun --ntasks-per-node=", n,
            ") or give each task its own GPU (srun --gpus-per-task=1)"));
      for (size_t i = 0; i < ranks.size(); ++i) gpu[size_t(ranks[i])] = int(i);
    }
    std::map<std::string, int> user;  // GPU id -> first rank of this host using it
    for (int r : share ? std::vector<int>{} : h.ranks) {
      const std::string& id = visible[size_t(r)][size_t(gpu[size_t(r)])];
      auto [it, fresh] = user.emplace(id, r);
      if (!fresh)
        throw UserError(str("ranks ", it->second, " and ", r, " on host ", h.host,
                            " would both use GPU ", id,
                            ": give each task its own GPU (srun --gpus-per-task=1) or let every "
                            "task see all of the node's GPUs"));
    }
  }
  return gpu;
}

std::vector<int> assign_gpus(const std::vector<std::string>& hosts,
                             const std::vector<int>& gpu_counts) {
  std::vector<std::vector<std::string>> visible(gpu_counts.size());
  for (size_t r = 0; r < gpu_counts.size(); ++r)
    for (int i = 0; i < gpu_counts[r]; ++i) visible[r].push_back(std::to_string(i));
  return assign_gpus(hosts, visible);
}

std::vector<std::string> format_rank_map(const Grid& grid, const std::vector<std::string>& hosts,
                                         const std::vector<int>& gpus, int max_rows) {
  const int n = grid.size();
  LOOM_CHECK(int(hosts.size()) == n, hosts.size(), " hosts for a grid of ", n);
  LOOM_CHECK(gpus.empty() || int(gpus.size()) == n, gpus.size(), " GPUs for a grid of ", n);
  const std::vector<HostRanks> nodes = by_host(hosts);
  const std::vector<int> local = node_local_ranks(hosts);
  auto gpu_text = [&](int r) {
    return gpus.empty() || gpus[size_t(r)] < 0 ? std::string("-") : std::to_string(gpus[size_t(r)]);
  };
  std::vector<std::string> out;
  const bool cp = grid.size(Axis::CP) > 1;
  out.push_back(str("grid dp", grid.size(Axis::DP), " x pp", grid.size(Axis::PP), " x tp",
                    grid.size(Axis::TP), cp ? str(" x cp", grid.size(Axis::CP)) : "", " = ",
                    plural(n, "rank", "ranks"), " on ", plural(long(nodes.size()), "host", "hosts"),
                    ", rank order ", order_text(grid), " (first axis innermost)"));
  if (n <= max_rows) {
    size_t hw = 4, gw = 3;
    for (const HostRanks& h : nodes) hw = std::max(hw, std::min<size_t>(h.host.size(), 40));
    for (int r = 0; r < n; ++r) gw = std::max(gw, gpu_text(r).size());
    const size_t rw = std::max<size_t>(4, digits(n - 1));
    const size_t dw = std::max<size_t>(2, digits(grid.size(Axis::DP) - 1));
    const size_t pw = std::max<size_t>(2, digits(grid.size(Axis::PP) - 1));
    const size_t tw = std::max<size_t>(2, digits(grid.size(Axis::TP) - 1));
    const size_t cw = std::max<size_t>(2, digits(grid.size(Axis::CP) - 1));
    out.push_back("  " + lpad("rank", rw) + "  " + rpad("host", hw) + "  " + lpad("gpu", gw) +
                  "  " + lpad("dp", dw) + "  " + lpad("pp", pw) + "  " + lpad("tp", tw) +
                  (cp ? "  " + lpad("cp", cw) : "") + "  local rank");
    for (int r = 0; r < n; ++r) {
      const Coord c = grid.coord_of(r);
      out.push_back("  " + lpad(std::to_string(r), rw) + "  " + rpad(hosts[size_t(r)], hw) + "  " +
                    lpad(gpu_text(r), gw) + "  " + lpad(std::to_string(c.dp), dw) + "  " +
                    lpad(std::to_string(c.pp), pw) + "  " + lpad(std::to_string(c.tp), tw) +
                    (cp ? "  " + lpad(std::to_string(c.cp), cw) : "") + "  " +
                    lpad(std::to_string(local[size_t(r)]), 10));
    }
    return out;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (int(i) == max_rows) {
      long rest = 0;
      for (size_t j = i; j < nodes.size(); ++j) rest += long(nodes[j].ranks.size());
      out.push_back(
          str("  ... and ", nodes.size() - i, " more hosts with ", plural(rest, "rank", "ranks")));
      break;
    }
    const HostRanks& h = nodes[i];
    std::string line = str("  ", h.host, ": ", plural(long(h.ranks.size()), "rank", "ranks"), " ",
                           int_ranges(h.ranks));
    if (!gpus.empty()) {
      std::vector<int> used;
      for (int r : h.ranks)
        if (gpus[size_t(r)] >= 0) used.push_back(gpus[size_t(r)]);
      std::sort(used.begin(), used.end());
      used.erase(std::unique(used.begin(), used.end()), used.end());
      line += used.empty() ? ", GPUs -" : ", GPUs " + int_ranges(used);
    }
    out.push_back(line);
  }
  return out;
}

}  // namespace loom
