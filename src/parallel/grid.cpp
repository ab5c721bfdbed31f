// Grid arithmetic: mixed-radix rank numbering over the four axes in the configured order.
#include "parallel/grid.h"

#include "core/check.h"

namespace loom {

const char* axis_name(Axis a) {
  return a == Axis::DP ? "dp" : a == Axis::PP ? "pp" : a == Axis::TP ? "tp" : "cp";
}

namespace {
[[noreturn]] void bad_order(const std::string& order) {
  throw UserError(str("parallel.order: '", order,
                      "' must list tp, dp and pp once each (and optionally cp), innermost first, ",
                      "e.g. 'tp-dp-pp' or 'tp-cp-dp-pp'"));
}

Axis parse_axis(const std::string& s, const std::string& order) {
  for (Axis a : {Axis::DP, Axis::PP, Axis::TP, Axis::CP})
    if (s == axis_name(a)) return a;
  bad_order(order);
}
}  // namespace

Grid::Grid(int dp, int pp, int tp, const std::string& order, int cp) : sizes_{dp, pp, tp, cp} {
  LOOM_CHECK(dp >= 1 && pp >= 1 && tp >= 1 && cp >= 1, "grid sizes dp=", dp, " pp=", pp, " tp=", tp,
             " cp=", cp);
  std::vector<Axis> axes;
  size_t start = 0;
  while (true) {
    size_t dash = order.find('-', start);
    axes.push_back(parse_axis(order.substr(start, dash - start), order));
    if (dash == std::string::npos) break;
    start = dash + 1;
  }
  bool seen[4] = {false, false, false, false};
  for (Axis a : axes) {
    if (seen[int(a)]) bad_order(order);
    seen[int(a)] = true;
  }
  if (!seen[0] || !seen[1] || !seen[2]) bad_order(order);
  if (!seen[int(Axis::CP)]) {  // unnamed: right after tp
    for (size_t i = 0; i < axes.size(); ++i)
      if (axes[i] == Axis::TP) {
        axes.insert(axes.begin() + long(i) + 1, Axis::CP);
        break;
      }
  }
  for (size_t i = 0; i < 4; ++i) order_[i] = axes[i];
}

Coord Grid::coord_of(int rank) const {
  LOOM_CHECK(rank >= 0 && rank < size(), "rank ", rank, " outside grid of ", size());
  Coord c;
  int rest = rank;
  for (Axis a : order_) {
    c.at(a) = rest % size(a);
    rest /= size(a);
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
    d.at(axis) = i;
    out.push_back(rank_of(d));
  }
  return out;
}

std::string Grid::describe(int rank) const {
  Coord c = coord_of(rank);
  std::string s = str("dp", c.dp, " pp", c.pp, " tp", c.tp);
  if (size(Axis::CP) > 1) s += str(" cp", c.cp);
  return s;
}

std::string order_text(const Grid& grid) {
  std::string out;
  for (Axis a : grid.order())
    if (a != Axis::CP || grid.size(Axis::CP) > 1)
      out += (out.empty() ? "" : "-") + std::string(axis_name(a));
  return out;
}

}  // namespace loom
