#!/usr/bin/env bash
# Launches `loom train` on N ranks with mpirun:
#   scripts/launch.sh -n N [--hostfile FILE] CONFIG.yaml [--set key=value]...
# On one machine with more ranks than cores it adds --oversubscribe and one OpenMP thread per
# rank; as root it adds the flags OpenMPI needs. With a hostfile (one "host slots=K" line per
# node, K = GPUs per node on GPU nodes) ranks are placed node by node, so tensor-parallel groups
# (tp <= K) stay inside a node and each rank takes the GPU of its node-local rank.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
n=1
hostfile=""
args=()
while (($#)); do
  case "$1" in
    -n|--np) n="$2"; shift 2 ;;
    --hostfile) hostfile="$2"; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
if ((${#args[@]} == 0)); then
  echo "launch.sh: missing CONFIG.yaml; usage: scripts/launch.sh -n N CONFIG.yaml [--set k=v]..." >&2
  exit 2
fi
bin="$here/build/bin/loom"
[[ -x "$bin" ]] || { echo "launch.sh: $bin not found; run scripts/build.sh first" >&2; exit 2; }

mpi=(mpirun -np "$n" --bind-to none)
[[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
if [[ -n "$hostfile" ]]; then
  mpi+=(--hostfile "$hostfile" --map-by slot)
elif ((n > $(nproc))); then
  mpi+=(--oversubscribe)
  export OMP_NUM_THREADS=1
fi
echo "+ ${mpi[*]} $bin train ${args[*]}" >&2
exec "${mpi[@]}" "$bin" train "${args[@]}"
