// Builds the per-axis MPI sub-communicators and discovers node-local ranks.
#include "parallel/parallel_ctx.h"

#include "core/log.h"

namespace loom {

namespace {
// A communicator of the ranks that share every coordinate except `axis`, ordered along it.
Comm split_axis(MPI_Comm world, const Grid& grid, int rank, Axis axis) {
  Coord c = grid.coord_of(rank);
  Coord base = c;
  (axis == Axis::DP ? base.dp : axis == Axis::PP ? base.pp : base.tp) = 0;
  int color = grid.rank_of(base);
  MPI_Comm sub;
  LOOM_MPI(MPI_Comm_split(world, color, c[axis], &sub));
  return Comm(sub, axis_name(axis));
}
}  // namespace

std::unique_ptr<ParallelCtx> make_parallel_ctx(const Grid& grid, MPI_Comm world) {
  auto ctx = std::make_unique<ParallelCtx>();
  ctx->grid = grid;
  ctx->world = Comm(world, "world");
  LOOM_CHECK(ctx->world.size() == grid.size(), "world size ", ctx->world.size(),
             " != grid size ", grid.size());
  ctx->rank = ctx->world.rank();
  ctx->coord = grid.coord_of(ctx->rank);
  ctx->dp = split_axis(world, grid, ctx->rank, Axis::DP);
  ctx->pp = split_axis(world, grid, ctx->rank, Axis::PP);
  ctx->tp = split_axis(world, grid, ctx->rank, Axis::TP);

  // Embedding group: stage 0 and stage pp-1 of the same (dp, tp); everyone else alone.
  int npp = grid.size(Axis::PP);
  bool member = npp > 1 && (ctx->first_stage() || ctx->last_stage());
  Coord base = ctx->coord;
  base.pp = 0;
  int color = member ? grid.rank_of(base) : MPI_UNDEFINED;
  MPI_Comm emb;
  LOOM_MPI(MPI_Comm_split(world, color, ctx->coord.pp, &emb));
  if (member) ctx->embed = Comm(emb, "embed");

  MPI_Comm node;
  LOOM_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, ctx->rank, MPI_INFO_NULL,
                               &node));
  Comm node_comm(node, "node");
  ctx->local_rank = node_comm.rank();
  ctx->local_size = node_comm.size();
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  ctx->host.assign(name, size_t(len));

  // A TP group should live inside one node: check that all its members share our node.
  // The lowest world rank on a node names that node.
  int node_id = ctx->rank;
  LOOM_MPI(MPI_Allreduce(&ctx->rank, &node_id, 1, MPI_INT, MPI_MIN, node));
  int lo = node_id, hi = node_id;
  LOOM_MPI(MPI_Allreduce(&node_id, &lo, 1, MPI_INT, MPI_MIN, ctx->tp.mpi()));
  LOOM_MPI(MPI_Allreduce(&node_id, &hi, 1, MPI_INT, MPI_MAX, ctx->tp.mpi()));
  if (lo != hi && ctx->coord.tp == 0)
    warn("tensor-parallel group of rank ", ctx->rank, " (", grid.describe(ctx->rank),
         ") spans nodes; keep tp <= GPUs per node and parallel.order starting with tp");
  return ctx;
}

}  // namespace loom
