// ParallelCtx: this rank's place in the grid and one communicator per axis (plus the group
// that ties the embedding of the first and last pipeline stage).
#pragma once
#include <memory>
#include <string>

#include "parallel/comm.h"
#include "parallel/grid.h"

namespace loom {

struct ParallelCtx {
  Grid grid{1, 1, 1};
  int rank = 0;
  Coord coord;
  Comm world, dp, pp, tp;
  Comm embed;  // first and last pipeline stage of the same (dp, tp); size 1 when pp == 1
  int local_rank = 0, local_size = 1;  // within the node (MPI_Comm_split_type SHARED)
  std::string host;

  bool first_stage() const { return coord.pp == 0; }
  bool last_stage() const { return coord.pp == grid.size(Axis::PP) - 1; }
};

// Splits `world` (MPI_COMM_WORLD, or a sub-communicator in tests) into the axis communicators
// of `grid`; its size must equal the grid's. Warns when a tensor-parallel group spans nodes.
std::unique_ptr<ParallelCtx> make_parallel_ctx(const Grid& grid, MPI_Comm world = MPI_COMM_WORLD);

}  // namespace loom
