// Grid: the pure mapping rank <-> (dp, pp, tp, cp) coordinates for a configurable axis order.
#pragma once
#include <array>
#include <string>
#include <vector>

namespace loom {

enum class Axis { DP = 0, PP = 1, TP = 2, CP = 3 };
const char* axis_name(Axis a);

struct Coord {
  int dp = 0, pp = 0, tp = 0, cp = 0;
  int operator[](Axis a) const {
    return a == Axis::DP ? dp : a == Axis::PP ? pp : a == Axis::TP ? tp : cp;
  }
  int& at(Axis a) { return a == Axis::DP ? dp : a == Axis::PP ? pp : a == Axis::TP ? tp : cp; }
  bool operator==(const Coord& o) const {
    return dp == o.dp && pp == o.pp && tp == o.tp && cp == o.cp;
  }
};

class Grid {
 public:
  // order: axes from innermost (fastest-varying rank) to outermost, e.g. "tp-dp-pp" (default):
  // rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)). The context-parallel axis
  // may be named ("tp-cp-dp-pp"); when it is not, it comes right after tp. Throws UserError for a
  // malformed order.
  Grid(int dp, int pp, int tp, const std::string& order = "tp-dp-pp", int cp = 1);

  int size() const { return sizes_[0] * sizes_[1] * sizes_[2] * sizes_[3]; }
  int size(Axis a) const { return sizes_[size_t(a)]; }
  Coord coord_of(int rank) const;
  int rank_of(const Coord& c) const;
  // Ranks of the group along `axis` that contains `rank`, ordered by their coordinate on it.
  std::vector<int> group_ranks(Axis axis, int rank) const;
  std::string describe(int rank) const;  // "dp1 pp0 tp1" (and " cp1" when cp > 1)
  const std::array<Axis, 4>& order() const { return order_; }

 private:
  std::array<int, 4> sizes_;   // by Axis
  std::array<Axis, 4> order_;  // innermost first
};

// The order as text, innermost first, leaving out cp when its size is 1: "tp-dp-pp".
std::string order_text(const Grid& grid);

}  // namespace loom
