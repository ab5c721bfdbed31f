// ParallelCtx: this rank's place in the grid and one communicator per axis (plus the group
// that ties the embedding of the first and last pipeline stage).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm.h"
#include "parallel/grid.h"

namespace loom {

struct ParallelCtx {
  Grid grid{1, 1, 1};
  int rank = 0;
  Coord coord;
  Comm world, dp, pp, tp, cp;
  Comm dpcp;   // cp > 1 only: the dp x cp ranks of the same (pp, tp), dp-major (see replicas())
  Comm embed;  // first and last pipeline stage of the same (dp, tp); size 1 when pp == 1
  // Expert parallelism (add_expert_comms; ep = 1 until then): each run of ep consecutive dp
  // ranks splits the experts (ep_group, by dp), and the dp ranks at the same place in their runs
  // hold the same experts (edp).
  int ep = 1;
  Comm ep_group, edp;
  int local_rank = 0, local_size = 1;  // within the node (MPI_Comm_split_type SHARED)
  int gpu = -1;  // device: cuda: the CUDA device of this rank (gpus_for_ranks); -1 on cpu
  std::string host;
  std::vector<std::string> hosts;  // every world rank's host, by world rank

  // The ranks that hold the same parameters and sum their gradients (ZeRO shards over them):
  // dp, or dp x cp with context parallelism; replica_index() is this rank's place among them.
  Comm& replicas() { return grid.size(Axis::CP) > 1 ? dpcp : dp; }
  const Comm& replicas() const { return grid.size(Axis::CP) > 1 ? dpcp : dp; }
  int replica_index() const { return coord.dp * grid.size(Axis::CP) + coord.cp; }
  // The ranks that hold this rank's experts and sum their gradients: dp / ep of them (expert
  // parallelism runs without context parallelism); this rank's place among them; its place in
  // its expert-parallel group (which experts it holds).
  Comm& expert_replicas() { return ep > 1 ? edp : replicas(); }
  int expert_replica_index() const { return ep > 1 ? coord.dp / ep : replica_index(); }
  int ep_rank() const { return coord.dp % ep; }
  bool first_stage() const { return coord.pp == 0; }
  bool last_stage() const { return coord.pp == grid.size(Axis::PP) - 1; }
};

// Splits `world` (MPI_COMM_WORLD, or a sub-communicator in tests) into the axis communicators
// of `grid`; its size must equal the grid's. Gathers every rank's host name.
std::unique_ptr<ParallelCtx> make_parallel_ctx(const Grid& grid, MPI_Comm world = MPI_COMM_WORLD);

// Expert parallelism: sets pc.ep and builds pc.ep_group and pc.edp from pc.dp. ep must divide
// dp (validate() says so first). Collective over pc.world.
void add_expert_comms(ParallelCtx& pc, int ep);

// Where the tensor-parallel groups run (from pc.hosts, so every rank decides the same): when one
// spans nodes, world rank 0 warns once, or with strict every rank throws the same UserError
// (parallel.strict_topology). Local: no communication.
void check_topology(const ParallelCtx& pc, bool strict);

// The GPU of every world rank (topology.h's assign_gpus), from each rank's count of visible GPUs
// or from the ids (UUIDs) of the GPUs it sees (nccl_comm.h: visible_gpu_ids()), which also
// handles one GPU per task (srun --gpus-per-task=1). Collective over pc.world; a node with more
// ranks than GPUs throws the same UserError on every rank.
std::vector<int> gpus_for_ranks(const ParallelCtx& pc, int gpus_on_node);
// share: ranks may share GPUs (assign_gpus; the host-staged testing mode, LOOM_DEVICE_COMM=host).
std::vector<int> gpus_for_ranks(const ParallelCtx& pc, const std::vector<std::string>& visible_ids,
                                bool share = false);
// This rank's entry of gpus_for_ranks (collective as well).
int gpu_for_rank(const ParallelCtx& pc, int gpus_on_node);

// The start-up rank map (format_rank_map) of pc's grid and hosts; gpus empty on cpu.
std::vector<std::string> rank_map_lines(const ParallelCtx& pc, const std::vector<int>& gpus);

}  // namespace loom
