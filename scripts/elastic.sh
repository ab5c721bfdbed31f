#!/usr/bin/env bash
# Elastic training: runs `loom train` under mpirun (a hostfile) or srun (inside a Slurm
# allocation) and, when a rank is killed or its host is lost, restarts on the hosts that remain
# with a layout `loom plan` chooses for them, resuming from the newest checkpoint:
#   scripts/elastic.sh [--hostfile FILE [--local-hosts]] [--max-restarts N] [--cluster C.yaml]
#                      [--loom BIN] CONFIG.yaml [--set key=value]...
# --hostfile FILE   "host slots=K" lines; ranks fill the hosts in file order (mpirun --map-by
#                   slot). Without it, inside a Slurm allocation: its nodes and tasks per node.
# --local-hosts     run every rank on this machine, the hostfile's names labelling groups of
#                   slots (tests; Open MPI merges names that all mean this machine).
# --max-restarts N  restarts before giving up (default 3).
# --cluster C.yaml  the cluster file loom plan models (default: this machine).
# docs/elastic.md: what is restarted, when, and how the layout is chosen.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/elastic_lib.sh"

hostfile="" local_hosts=0 max_restarts=3 cluster="" loom="$here/build/bin/loom"
args=()
while (($#)); do
  case "$1" in
    --hostfile) need_value "$@"; hostfile="$2"; shift 2 ;;
    --local-hosts) local_hosts=1; shift ;;
    --max-restarts) need_value "$@"; max_restarts="$2"; shift 2 ;;
    --cluster) need_value "$@"; cluster="$2"; shift 2 ;;
    --loom) need_value "$@"; loom="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --set) need_value "$@"; args+=("$1" "$2"); shift 2 ;;
    -*) die 2 "unknown option '$1'; see scripts/elastic.sh --help" ;;
    *) args+=("$1"); shift ;;
  esac
done

# Bad input: one line each, before anything runs.
((${#args[@]})) && [[ ${args[0]} != --set ]] ||
  die 2 "missing CONFIG.yaml; usage: scripts/elastic.sh [--hostfile FILE] [--max-restarts N] CONFIG.yaml [--set k=v]..."
config="${args[0]}"
[[ -f $config ]] || die 2 "config '$config' not found"
[[ $max_restarts =~ ^[0-9]+$ ]] && ((max_restarts <= 1000)) ||
  die 2 "--max-restarts: expected a whole number 0..1000, got '$max_restarts'"
[[ -x $loom ]] || die 2 "$loom not found; run scripts/build.sh or give --loom BIN"
[[ -z $cluster || -f $cluster ]] || die 2 "--cluster: '$cluster' not found"
if [[ -n $hostfile ]]; then
  launcher=mpirun
  read_hostfile "$hostfile" || exit 2
elif [[ -n ${SLURM_JOB_ID:-} ]]; then
  launcher=srun
  ((local_hosts == 0)) || die 2 "--local-hosts needs --hostfile"
  read_slurm_nodes || exit 2
else
  die 2 "no hosts: give --hostfile FILE (mpirun), or run inside a Slurm allocation (srun)"
fi

plan_args=("$config" "${args[@]:1}")
[[ -n $cluster ]] && plan_args+=(--cluster "$cluster")
# The config must plan on the hosts we have (it also checks the config, with loom's own errors).
plan_layout "$(total_slots)" > /dev/null || exit 2

logdir="$(mktemp -d "${TMPDIR:-/tmp}/loom-elastic.XXXXXX")"
child=0 stopping=""
forward() {  # a stop reaches loom; the job is not restarted after it
  stopping=$1
  ((child > 0)) && kill -"$1" "$child" 2> /dev/null
}
for sig in TERM INT USR1; do trap "forward $sig" "$sig"; done

attempt=0 reason="" layout=()
while :; do
  ranks=$(total_slots)
  if ((attempt > 0)); then
    line=$(plan_layout "$ranks") || { rm -rf "$logdir"; exit 3; }
    read -r ranks rest <<< "$line"
    read -r -a layout <<< "$rest"
  fi
  use_hosts "$ranks"
  launch_command "$ranks"
  cmd=("${launch[@]}" "$loom" train "${args[@]}" "${layout[@]}")
  ((attempt > 0)) && cmd+=(--set checkpoint.resume=auto)
  note "attempt $attempt: $ranks ranks on ${used_hosts[*]}${layout[*]:+ with ${layout[*]}}"
  export LOOM_ELASTIC_ATTEMPT=$attempt LOOM_ELASTIC_REASON="$reason"
  export LOOM_ELASTIC_HOSTS="${used_hosts[*]}"
  log="$logdir/attempt_$attempt.log"
  "${cmd[@]}" > "$log" 2>&1 &
  child=$!
  tail -n +1 --pid=$child -f "$log" &
  status=0
  while :; do  # a trapped signal ends `wait` early: wait again until loom is gone
    wait "$child"; status=$?
    kill -0 "$child" 2> /dev/null || break
  done
  wait 2> /dev/null  # tail
  child=0
  if ((status == 0)); then
    note "attempt $attempt finished"
    rm -rf "$logdir"
    exit 0
  fi
  if ((status == 75)); then  # loom saved a checkpoint and stopped on a signal before the end
    note "attempt $attempt stopped early on a signal${stopping:+ (SIG$stopping)} after saving a checkpoint (exit 75); not restarted: run again to continue"
    rm -rf "$logdir"
    exit 75
  fi
  if [[ -n $stopping ]]; then
    note "attempt $attempt ended with status $status after SIG$stopping; not restarted"
    rm -rf "$logdir"
    exit "$status"
  fi
  classify_failure "$log" "$status" "$launcher"  # sets reason, failed_host, restartable
  if ((restartable == 0)); then
    note "attempt $attempt failed: $reason; not restarted (a restart would meet the same error)"
    rm -rf "$logdir"
    exit "$status"
  fi
  if ((attempt >= max_restarts)); then
    note "attempt $attempt failed: $reason; $max_restarts restarts done (--max-restarts), giving up"
    rm -rf "$logdir"
    exit 3
  fi
  drop_host "$failed_host"
  if (($(total_slots) == 0)); then
    note "attempt $attempt failed: $reason; no hosts remain"
    rm -rf "$logdir"
    exit 3
  fi
  attempt=$((attempt + 1))
  note "attempt $((attempt - 1)) failed: $reason; restart $attempt of at most $max_restarts without ${failed_host:-any host}"
done
