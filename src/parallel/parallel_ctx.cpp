// Builds the per-axis MPI sub-communicators, discovers node-local ranks and every rank's host.
#include "parallel/parallel_ctx.h"

#include "core/check.h"
#include "core/log.h"
#include "parallel/topology.h"

namespace loom {

namespace {
// A communicator of the ranks that share every coordinate except `axis`, ordered along it.
Comm split_axis(MPI_Comm world, const Grid& grid, int rank, Axis axis) {
  Coord c = grid.coord_of(rank);
  Coord base = c;
  base.at(axis) = 0;
  int color = grid.rank_of(base);
  MPI_Comm sub;
  LOOM_MPI(MPI_Comm_split(world, color, c[axis], &sub));
  return Comm(sub, axis_name(axis));
}

// Every rank's string, by rank of `comm`.
std::vector<std::string> allgather_strings(MPI_Comm comm, const std::string& mine) {
  int size = 1;
  LOOM_MPI(MPI_Comm_size(comm, &size));
  int len = int(mine.size());
  std::vector<int> lens(static_cast<size_t>(size)), displs(lens.size());
  LOOM_MPI(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm));
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[size_t(r)] = total;
    total += lens[size_t(r)];
  }
  std::string all(size_t(total), '\0');
  LOOM_MPI(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(),
                          MPI_CHAR, comm));
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r)
    out.push_back(all.substr(size_t(displs[size_t(r)]), size_t(lens[size_t(r)])));
  return out;
}
}  // namespace

std::unique_ptr<ParallelCtx> make_parallel_ctx(const Grid& grid, MPI_Comm world) {
  auto ctx = std::make_unique<ParallelCtx>();
  ctx->grid = grid;
  ctx->world = Comm(world, "world");
  LOOM_CHECK(ctx->world.size() == grid.size(), "world size ", ctx->world.size(), " != grid size ",
             grid.size());
  ctx->rank = ctx->world.rank();
  ctx->coord = grid.coord_of(ctx->rank);
  ctx->dp = split_axis(world, grid, ctx->rank, Axis::DP);
  ctx->pp = split_axis(world, grid, ctx->rank, Axis::PP);
  ctx->tp = split_axis(world, grid, ctx->rank, Axis::TP);
  ctx->cp = split_axis(world, grid, ctx->rank, Axis::CP);
  // Gradient replicas: with context parallelism the dp x cp ranks of the same (pp, tp), ordered
  // dp-major; without it the dp communicator itself.
  const int ncp = grid.size(Axis::CP);
  if (ncp > 1) {
    Coord base = ctx->coord;
    base.dp = base.cp = 0;
    MPI_Comm rep;
    LOOM_MPI(MPI_Comm_split(world, grid.rank_of(base), ctx->coord.dp * ncp + ctx->coord.cp, &rep));
    ctx->dpcp = Comm(rep, "dp x cp");
  }

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
  LOOM_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, ctx->rank, MPI_INFO_NULL, &node));
  Comm node_comm(node, "node");
  ctx->local_rank = node_comm.rank();
  ctx->local_size = node_comm.size();
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  ctx->host.assign(name, size_t(len));
  // Every rank's host, for the topology decisions (check_topology, gpus_for_ranks) that every
  // rank then takes alike, and for the rank map.
  ctx->hosts = allgather_strings(world, ctx->host);
  return ctx;
}

void add_expert_comms(ParallelCtx& pc, int ep) {
  const int dp = pc.grid.size(Axis::DP);
  LOOM_CHECK(ep >= 1 && dp % ep == 0, "parallel.ep=", ep, " does not divide dp=", dp);
  pc.ep = ep;
  if (ep == 1) return;
  // Within pc.dp (ranks ordered by dp): runs of ep consecutive dp ranks, and across the runs.
  MPI_Comm group, replicas;
  LOOM_MPI(MPI_Comm_split(pc.dp.mpi(), pc.coord.dp / ep, pc.coord.dp % ep, &group));
  LOOM_MPI(MPI_Comm_split(pc.dp.mpi(), pc.coord.dp % ep, pc.coord.dp / ep, &replicas));
  pc.ep_group = Comm(group, "ep");
  pc.edp = Comm(replicas, "expert dp");
}

void check_topology(const ParallelCtx& pc, bool strict) {
  const auto crossing = tp_groups_crossing_nodes(pc.grid, pc.hosts);
  if (crossing.empty()) return;
  if (strict) throw UserError(tp_crossing_message(pc.grid, pc.hosts, crossing, true));
  if (pc.rank == 0) warn(tp_crossing_message(pc.grid, pc.hosts, crossing, false));
}

std::vector<int> gpus_for_ranks(const ParallelCtx& pc, int gpus_on_node) {
  std::vector<int> counts(size_t(pc.world.size()));
  LOOM_MPI(MPI_Allgather(&gpus_on_node, 1, MPI_INT, counts.data(), 1, MPI_INT, pc.world.mpi()));
  return assign_gpus(pc.hosts, counts);
}

std::vector<int> gpus_for_ranks(const ParallelCtx& pc, const std::vector<std::string>& visible_ids,
                                bool share) {
  std::string mine;  // ids joined by '\n' (UUIDs and indices never contain one)
  for (const auto& id : visible_ids) mine += id + "\n";
  std::vector<std::vector<std::string>> visible;
  for (const std::string& all : allgather_strings(pc.world.mpi(), mine)) {
    visible.emplace_back();
    for (size_t start = 0, end; (end = all.find('\n', start)) != std::string::npos; start = end + 1)
      visible.back().push_back(all.substr(start, end - start));
  }
  return assign_gpus(pc.hosts, visible, share);
}

int gpu_for_rank(const ParallelCtx& pc, int gpus_on_node) {
  return gpus_for_ranks(pc, gpus_on_node)[size_t(pc.rank)];
}

std::vector<std::string> rank_map_lines(const ParallelCtx& pc, const std::vector<int>& gpus) {
  return format_rank_map(pc.grid, pc.hosts, gpus);
}

}  // namespace loom
