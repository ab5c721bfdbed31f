// Grid arithmetic: mixed-radix rank numbering over the three axes in the configured order.
#include "parallel/grid.h"

#include "core/check.h"

namespace loom {

const char* axis_name(Axis a) { return a == Axis::DP ? "dp" : a == Axis::PP ? "pp" : "tp"; }

static Axis parse_axis(const std::string& s, const std::string& order) {
  if (s == "dp") return Axis::DP;
  if (s == "pp") return Axis::PP;
  if (s == "tp") return Axis::TP;
  throw UserError(str("parallel.order: '", order,
                      "' must list tp, dp and pp once each, innermost first, e.g. 'tp-dp-pp'"));
}

Grid::Grid(int dp, int pp, int tp, const std::string& order) : dp_(dp), pp_(pp), tp_(tp) {
  LOOM_CHECK(dp >= 1 && pp >= 1 && tp >= 1, "grid sizes dp=", dp, " pp=", pp, " tp=", tp);
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t dash = order.find('-', start);
    parts.push_back(order.substr(start, dash - start));
    if (dash == std::string::npos) break;
    start = dash + 1;
  }
  if (parts.size() != 3) parse_axis("", order);
  bool seen[3] = {false, false, false};
  for (int i = 0; i < 3; ++i) {
    Axis a = parse_axis(parts[i], order);
    if (seen[int(a)]) parse_axis("", order);
    seen[int(a)] = true;
    order_[i] = a;
  }
}

Coord Grid::coord_of(int rank) const {
  LOOM_CHECK(rank >= 0 && rank < size(), "rank ", rank, " outside grid of ", size());
  Coord c;
  int rest = rank;
  for (Axis a : order_) {
    int v = rest % size(a);
    rest /= size(a);
    (a == Axis::DP ? c.dp : a == Axis::PP ? c.pp : c.tp) = v;
  }
  return c;
}

int Grid::rank_of(const Coord& c) const {
  int rank = 0, stride = 1;
  for (Axis a : order_) {
    LOOM_CHECK(c[a] >= 0 && c[a] < size(a), axis_name(a), " coordinate ", c[a], " out of ", size(a));
    rank += c[a] * stride;
    stride *= size(a);
  }
  return rank;
}

std::vector<int> Grid::group_ranks(Axis axis, int rank) const {
  Coord c = coord_of(rank);
  std::vector<int> out;
  for (int i = 0; i < size(axis); ++i) {
    Coord d = c;
    (axis == Axis::DP ? d.dp : axis == Axis::PP ? d.pp : d.tp) = i;
    out.push_back(rank_of(d));
  }
  return out;
}

std::string Grid::describe(int rank) const {
  Coord c = coord_of(rank);
  return str("dp", c.dp, " pp", c.pp, " tp", c.tp);
}

}  // namespace loom
