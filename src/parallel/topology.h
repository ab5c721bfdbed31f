// Topology: where the ranks run (one host name per world rank) and the decisions taken from it,
// as pure functions: TP groups that cross nodes, the GPU of each rank, the start-up rank map.
#pragma once
#include <string>
#include <vector>

#include "parallel/grid.h"

namespace loom {

// Node-local rank of every world rank: its position among the ranks on the same host, in world
// rank order (what MPI_Comm_split_type(SHARED) with the world rank as key gives).
std::vector<int> node_local_ranks(const std::vector<std::string>& hosts);

// The tensor-parallel groups (their world ranks, in tp order) whose members are not all on one
// host. hosts has one entry per rank of the grid.
std::vector<std::vector<int>> tp_groups_crossing_nodes(const Grid& grid,
                                                       const std::vector<std::string>& hosts);

// One line describing `crossing` (non-empty, from tp_groups_crossing_nodes): how many groups,
// an example with its hosts, the ranks per node, and the fix. With strict it is the error of
// parallel.strict_topology: true, else the warning (which names that key).
std::string tp_crossing_message(const Grid& grid, const std::vector<std::string>& hosts,
                                const std::vector<std::vector<int>>& crossing, bool strict);

// The GPU (CUDA device index) of every rank. visible[r] names the GPUs rank r sees, in CUDA
// order, by an id that is equal for the same physical GPU (its UUID). Ranks of a host that see
// the same list share those GPUs and take them in world rank order: with every GPU of the node
// visible to every rank this is the node-local rank; with one GPU per task (srun
// --gpus-per-task=1, or CUDA_VISIBLE_DEVICES set per rank) it is 0. Throws UserError (the same
// on every rank: the inputs are the whole job's) when a rank sees no GPU, when a host runs more
// ranks than the GPUs they share, or when two ranks of a host would use the same GPU. With
// `share` (the host-staged testing mode, LOOM_DEVICE_COMM=host) ranks may share a GPU: the
// ranks of a group take its GPUs round robin, and only a rank that sees none is an error.
std::vector<int> assign_gpus(const std::vector<std::string>& hosts,
                             const std::vector<std::vector<std::string>>& visible,
                             bool share = false);
// The same from counts alone (rank r sees gpu_counts[r] GPUs, every rank of a host the same
// ones): the GPU is the node-local rank, and a host with more ranks than GPUs is an error.
std::vector<int> assign_gpus(const std::vector<std::string>& hosts,
                             const std::vector<int>& gpu_counts);

// The start-up table: a header line, then one line per rank (rank, host, GPU, dp, pp, tp,
// node-local rank) up to max_rows ranks; beyond that one line per host (its ranks and GPUs as
// ranges), up to max_rows hosts. gpus: one per rank, or empty (cpu): the GPU column shows "-".
std::vector<std::string> format_rank_map(const Grid& grid, const std::vector<std::string>& hosts,
                                         const std::vector<int>& gpus, int max_rows = 64);

// "0-3,8,10-11": sorted integers as ranges.
std::string int_ranges(const std::vector<int>& sorted);

}  // namespace loom
