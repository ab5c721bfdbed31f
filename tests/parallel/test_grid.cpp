// Grid: rank <-> coordinates for every order, group membership, the design's formula.
#include <gtest/gtest.h>

#include <set>

#include "core/check.h"
#include "parallel/grid.h"

namespace loom {
namespace {

TEST(Grid, DefaultOrderFollowsTheDesignFormula) {
  Grid g(2, 3, 4);  // dp, pp, tp
  for (int pp = 0; pp < 3; ++pp)
    for (int dp = 0; dp < 2; ++dp)
      for (int tp = 0; tp < 4; ++tp) {
        int rank = tp + 4 * (dp + 2 * pp);
        EXPECT_EQ(g.rank_of({dp, pp, tp}), rank);
        EXPECT_EQ(g.coord_of(rank), (Coord{dp, pp, tp}));
      }
}

TEST(Grid, EveryOrderIsABijection) {
  for (const char* order : {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"}) {
    Grid g(2, 2, 3, order);
    std::set<int> seen;
    for (int r = 0; r < g.size(); ++r) {
      Coord c = g.coord_of(r);
      EXPECT_EQ(g.rank_of(c), r) << order;
      seen.insert(c.dp * 100 + c.pp * 10 + c.tp);
    }
    EXPECT_EQ(seen.size(), size_t(g.size())) << order;
  }
  // The innermost axis has consecutive ranks.
  Grid g(2, 2, 2, "dp-tp-pp");
  EXPECT_EQ(g.group_ranks(Axis::DP, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(g.group_ranks(Axis::TP, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(g.group_ranks(Axis::PP, 0), (std::vector<int>{0, 4}));
}

TEST(Grid, GroupsPartitionTheRanks) {
  Grid g(2, 2, 2);
  for (Axis a : {Axis::DP, Axis::PP, Axis::TP}) {
    std::set<std::vector<int>> groups;
    for (int r = 0; r < g.size(); ++r) {
      auto grp = g.group_ranks(a, r);
      EXPECT_EQ(int(grp.size()), g.size(a));
      EXPECT_EQ(grp[size_t(g.coord_of(r)[a])], r);  // ordered by the axis coordinate
      groups.insert(grp);
    }
    EXPECT_EQ(int(groups.size()), g.size() / g.size(a));
  }
  EXPECT_EQ(g.group_ranks(Axis::TP, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(g.group_ranks(Axis::DP, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(g.group_ranks(Axis::PP, 5), (std::vector<int>{1, 5}));
}

TEST(Grid, MalformedOrderIsAUserError) {
  EXPECT_THROW(Grid(1, 1, 1, "tp-dp"), UserError);
  EXPECT_THROW(Grid(1, 1, 1, "tp-tp-pp"), UserError);
  EXPECT_THROW(Grid(1, 1, 1, "tp-dp-xx"), UserError);
}

TEST(Grid, ContextAxisFollowsTpUnlessNamed) {
  // dp 2, pp 2, tp 2, cp 2 in the default order: rank = tp + 2 * (cp + 2 * (dp + 2 * pp)).
  Grid g(2, 2, 2, "tp-dp-pp", 2);
  EXPECT_EQ(g.size(), 16);
  for (int r = 0; r < 16; ++r) {
    const Coord c = g.coord_of(r);
    EXPECT_EQ(r, c.tp + 2 * (c.cp + 2 * (c.dp + 2 * c.pp)));
    EXPECT_EQ(g.rank_of(c), r);
  }
  EXPECT_EQ(g.group_ranks(Axis::CP, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(order_text(g), "tp-cp-dp-pp");
  EXPECT_EQ(g.describe(7), "dp1 pp0 tp1 cp1");  // 7 = 1 + 2 * (1 + 2 * 1)
  // Named: cp outermost.
  Grid h(2, 1, 2, "tp-dp-pp-cp", 2);
  EXPECT_EQ(h.coord_of(4), (Coord{0, 0, 0, 1}));
  EXPECT_EQ(h.group_ranks(Axis::CP, 1), (std::vector<int>{1, 5}));
  // Without context parallelism the text and the numbering are the three-axis ones.
  EXPECT_EQ(order_text(Grid(2, 2, 2)), "tp-dp-pp");
  EXPECT_EQ(Grid(2, 2, 2).describe(3), "dp1 pp0 tp1");
  EXPECT_THROW(Grid(1, 1, 1, "tp-cp-dp-cp"), UserError);
}

}  // namespace
}  // namespace loom
