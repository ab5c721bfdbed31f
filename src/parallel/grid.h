// Grid: the pure mapping rank <-> (dp, pp, tp) coordinates for a configurable axis order.
#pragma once
#include <array>
#include <string>
#include <vector>

namespace loom {

enum class Axis { DP = 0, PP = 1, TP = 2 };
const char* axis_name(Axis a);

struct Coord {
  int dp = 0, pp = 0, tp = 0;
  int operator[](Axis a) const { return a == Axis::DP ? dp : a == Axis::PP ? pp : tp; }
  bool operator==(const Coord& o) const { return dp == o.dp && pp == o.pp && tp == o.tp; }
};

class Grid {
 public:
  // order: axes from innermost (fastest-varying rank) to outermost, e.g. "tp-dp-pp" (default):
  // rank = tp_rank + tp * (dp_rank + dp * pp_rank). Throws UserError for a malformed order.
  Grid(int dp, int pp, int tp, const std::string& order = "tp-dp-pp");

  int size() const { return dp_ * pp_ * tp_; }
  int size(Axis a) const { return a == Axis::DP ? dp_ : a == Axis::PP ? pp_ : tp_; }
  Coord coord_of(int rank) const;
  int rank_of(const Coord& c) const;
  // Ranks of the group along `axis` that contains `rank`, ordered by their coordinate on it.
  std::vector<int> group_ranks(Axis axis, int rank) const;
  std::string describe(int rank) const;  // "dp1 pp0 tp1"
  const std::array<Axis, 3>& order() const { return order_; }

 private:
  int dp_, pp_, tp_;
  std::array<Axis, 3> order_;  // innermost first
};

}  // namespace loom
