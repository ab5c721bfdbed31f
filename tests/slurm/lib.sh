# Shared helpers of the Slurm tests (sourced): start the test cluster, make a corpus, wait for jobs.
# shellcheck shell=bash
# usage from a test: source lib.sh; slurm_setup LOOM_BINARY WORKDIR SOURCE_DIR
fail() {
  echo "FAIL: $*"
  exit 1
}

# Starts (or reuses) the two-node test cluster; skips (exit 77) only where Slurm cannot run.
slurm_setup() {
  loom="$(realpath "$1")"
  work="$2"
  src="$(realpath "$3")"
  bin="$(dirname "$loom")"
  if [ "$(id -u)" != 0 ] || ! command -v unshare > /dev/null; then
    echo "SKIP: the Slurm test cluster needs root and unshare (slurmd runs as root in namespaces)"
    exit 77
  fi
  rm -rf "$work"
  mkdir -p "$work"
  "$src/scripts/slurm/test_cluster.sh" start || fail "the Slurm test cluster did not start"
  eval "$("$src/scripts/slurm/test_cluster.sh" env)"
  # Jobs get this environment (sbatch exports it). 8 ranks share 2 cores: without yielding,
  # Open MPI's busy polling makes a tiny step 50x slower. The nodes talk over loopback.
  export LOOM_BIN="$loom" OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
  export OMPI_MCA_btl_tcp_if_include=lo
}

# A small byte-level corpus at $work/corpus.{bin,idx}.
make_corpus() {
  mkdir -p "$work/text"
  for f in /usr/share/common-licenses/*; do
    [ -f "$f" ] && cp "$f" "$work/text/$(basename "$f").txt"
  done
  "$bin/loom-preprocess" --input "$work/text" --output-prefix "$work/corpus" --tokenizer bytes \
    --append-eod --workers 1 > /dev/null 2>&1 || fail "loom-preprocess"
}

# The log of a failed job without its per-step lines: each attempt's start, srun's verdicts, a
# crashed rank's report (signal, rank, backtrace) and loom's errors, the last 60 lines.
job_story() { grep -v -E '^\[loom [^]]*\] step +[0-9]+/' "$1" | tail -60; }

job_field() { scontrol show job "$1" 2> /dev/null | grep -o "$2=[^ ]*" | head -1 | cut -d= -f2; }

# Waits until job $1 ends (requeues included), at most $2 seconds; prints its final state.
wait_job() {
  local id="$1" deadline=$((SECONDS + $2)) state
  while [ $SECONDS -lt $deadline ]; do
    state="$(job_field "$id" JobState)"
    case "$state" in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
        echo "$state"
        return 0
        ;;
    esac
    sleep 2
  done
  scancel "$id" 2> /dev/null
  echo "TIMED_OUT_WAITING(last state ${state:-unknown})"
}

# Submits scripts/slurm/loom.sbatch from the repository root; prints the job id.
submit() {
  (cd "$src" && sbatch --parsable "$@") || fail "sbatch $*"
}

# True when the job log $1 shows Open MPI 4.1's start-up crash on this one-machine cluster
# (docs/slurm.md): a task reported by Open MPI's own signal handler, which is only in place
# inside MPI_Init, and no crash report of loom's ("[loom rN ...] fatal: SIG...", installed
# right after MPI_Init).
mpi_init_crash() {
  grep -q '\*\*\* Process received signal \*\*\*' "$1" && ! grep -q '\] fatal: SIG' "$1"
}

# run_job NAME LIMIT SBATCH_ARGS...: submits a job whose log is $work/NAME-ID.out, run folder
# $work/NAME_run and checkpoints $work/NAME_ck, waits at most LIMIT seconds; prints "ID STATE".
# A job lost to Open MPI's start-up crash is submitted again once, from empty folders, with a
# line saying so: that crash is not loom's (3 in 235 launches of a 10-line MPI program here).
run_job() {
  local name=$1 limit=$2 try id state
  shift 2
  for try in 1 2; do
    rm -rf "$work/${name}_run" "$work/${name}_ck"
    id=$(submit --output="$work/$name-%j.out" "$@" --set run.dir="$work/${name}_run" \
      --set checkpoint.dir="$work/${name}_ck")
    state=$(wait_job "$id" "$limit")
    if [ "$try" = 2 ] || [ "$state" != FAILED ] || ! mpi_init_crash "$work/$name-$id.out"; then
      break
    fi
    echo "job $id ($name) lost to Open MPI's start-up crash (docs/slurm.md); submitting it again:" >&2
    job_story "$work/$name-$id.out" | grep -m4 -E 'Process received signal|srun: error' >&2
  done
  echo "$id $state"
}

# launch LOG LIMIT [DIR...] -- CMD...: runs CMD (salloc, srun or a script that calls srun) under
# `timeout LIMIT` with its output in LOG and returns its status. A launch lost to Open MPI's
# start-up crash (whatever its status: elastic.sh restarts after it) runs once more, with a line
# saying so, after the DIRs (the run's output folders) are removed; the lost log is kept as
# LOG.lost. A second loss is returned as it is.
launch() {
  local log=$1 limit=$2 try rc dirs=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    dirs+=("$1")
    shift
  done
  [ "${1:-}" = -- ] || fail "launch: no -- before the command"
  shift
  for try in 1 2; do
    timeout "$limit" "$@" > "$log" 2>&1
    rc=$?
    if [ "$try" = 2 ] || ! mpi_init_crash "$log"; then
      return $rc
    fi
    echo "launch lost to Open MPI's start-up crash (docs/slurm.md), status $rc; running it again:" >&2
    grep -m4 -E 'Process received signal|srun: error' "$log" >&2
    mv "$log" "$log.lost"
    [ ${#dirs[@]} = 0 ] || rm -rf "${dirs[@]}"
  done
}

# "step loss lr grad_norm tokens" per metrics line, the fields that must repeat exactly.
losses() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "loss" in j:
        print(j["step"], repr(j["loss"]), repr(j["lr"]), repr(j["grad_norm"]), j["tokens"])
' "$1"
}
