# Functions of scripts/elastic.sh: hosts and their slots, the launch command, the layout from
# loom plan, and why an attempt failed. Sourced; uses the caller's variables (loom, logdir,
# plan_args, launcher, local_hosts).

note() { echo "elastic.sh [$(date +%H:%M:%S)]: $*" >&2; }
die() { local code=$1; shift; echo "elastic.sh: error: $*" >&2; exit "$code"; }
need_value() { (($# >= 2)) || die 2 "$1 needs a value; see scripts/elastic.sh --help"; }

hosts=() slots=()  # the hosts that remain, in launch order, and their ranks

# "host [slots=K]" lines (# comments, blank lines ignored); K defaults to 1.
read_hostfile() {
  local file=$1 n=0 line name rest k
  [[ -f $file ]] || { echo "elastic.sh: error: hostfile '$file' not found" >&2; return 1; }
  while IFS= read -r line || [[ -n $line ]]; do
    n=$((n + 1))
    line=${line%%#*}
    read -r name rest <<< "$line"
    [[ -z $name ]] && continue
    k=1
    if [[ -n $rest ]]; then
      if [[ $rest =~ ^slots=([0-9]+)$ ]] && ((BASH_REMATCH[1] > 0)); then
        k=${BASH_REMATCH[1]}
      else
        echo "elastic.sh: error: $file:$n: expected 'host slots=K' with K >= 1, got '$line'" >&2
        return 1
      fi
    fi
    if [[ " ${hosts[*]} " == *" $name "* ]]; then
      echo "elastic.sh: error: $file:$n: host '$name' is listed twice; give it once with slots=K" >&2
      return 1
    fi
    hosts+=("$name") slots+=("$k")
  done < "$file"
  ((${#hosts[@]})) || { echo "elastic.sh: error: hostfile '$file' names no host" >&2; return 1; }
}

# The allocation's nodes (SLURM_JOB_NODELIST) and tasks per node (SLURM_TASKS_PER_NODE, e.g.
# "4(x2),2").
read_slurm_nodes() {
  local part count reps
  mapfile -t hosts < <(scontrol show hostnames "${SLURM_JOB_NODELIST:-}")
  ((${#hosts[@]})) || { echo "elastic.sh: error: no nodes in SLURM_JOB_NODELIST" >&2; return 1; }
  IFS=, read -r -a parts <<< "${SLURM_TASKS_PER_NODE:-}"
  for part in "${parts[@]}"; do
    if [[ $part =~ ^([0-9]+)\(x([0-9]+)\)$ ]]; then
      count=${BASH_REMATCH[1]} reps=${BASH_REMATCH[2]}
    elif [[ $part =~ ^[0-9]+$ ]]; then
      count=$part reps=1
    else
      echo "elastic.sh: error: SLURM_TASKS_PER_NODE='${SLURM_TASKS_PER_NODE:-}' does not parse; give sbatch/salloc --ntasks-per-node" >&2
      return 1
    fi
    for ((r = 0; r < reps; ++r)); do slots+=("$count"); done
  done
  ((${#slots[@]} == ${#hosts[@]})) || {
    echo "elastic.sh: error: SLURM_TASKS_PER_NODE='${SLURM_TASKS_PER_NODE:-}' does not give one count per node of ${hosts[*]}" >&2
    return 1
  }
}

total_slots() {
  local t=0 k
  for k in "${slots[@]}"; do t=$((t + k)); done
  echo "$t"
}

# "W --set parallel.dp=.. ...": the fastest layout of at most $1 ranks (loom plan --layout-args).
plan_layout() {
  local out
  if ! out=$("$loom" plan "${plan_args[@]}" --ranks "$1" --layout-args 2>&1); then
    echo "elastic.sh: error: loom plan for at most $1 ranks: ${out##*loom: error: }" >&2
    return 1
  fi
  echo "$out" | tail -1
}

# used_hosts, rank_host (rank -> host) and $logdir/hostfile for $1 ranks: hosts filled in order.
use_hosts() {
  local want=$1 i k
  used_hosts=() rank_host=()
  : > "$logdir/hostfile"
  for i in "${!hosts[@]}"; do
    ((want > 0)) || break
    k=${slots[$i]}
    ((k > want)) && k=$want
    used_hosts+=("${hosts[$i]}")
    echo "${hosts[$i]} slots=$k" >> "$logdir/hostfile"
    for ((r = 0; r < k; ++r)); do rank_host+=("${hosts[$i]}"); done
    want=$((want - k))
  done
}

# launch=(...): mpirun or srun for $1 ranks on used_hosts.
launch_command() {
  local n=$1
  if [[ $launcher == srun ]]; then
    local IFS=,
    launch=(srun --kill-on-bad-exit=1 --mpi=pmix --distribution=block:block -n "$n"
            -N "${#used_hosts[@]}" --nodelist="${used_hosts[*]}")
    [[ -n ${excluded[*]:-} ]] && launch+=(--exclude="${excluded[*]}")
    unset IFS
    read -r -a extra <<< "${LOOM_SRUN_ARGS:-}"
    launch+=("${extra[@]}")
    return
  fi
  launch=(mpirun -np "$n" --bind-to none -x LOOM_ELASTIC_ATTEMPT -x LOOM_ELASTIC_REASON
          -x LOOM_ELASTIC_HOSTS)
  [[ $(id -u) -eq 0 ]] && launch+=(--allow-run-as-root)
  if ((local_hosts)); then
    launch+=(--oversubscribe)
  else
    launch+=(--hostfile "$logdir/hostfile" --map-by slot)
  fi
}

excluded=()
drop_host() {
  local h=$1 i
  [[ -z $h ]] && return
  excluded+=("$h")
  for i in "${!hosts[@]}"; do
    [[ ${hosts[$i]} == "$h" ]] && unset 'hosts[i]' 'slots[i]'
  done
  hosts=("${hosts[@]}") slots=("${slots[@]}")
}

# Why attempt log $1 ended with status $2: sets reason, failed_host and restartable (1 when a
# rank was killed by a signal or a host was lost; 0 for loom's own errors, which a restart meets
# again).
classify_failure() {
  local log=$1 status=$2 m
  reason="" failed_host="" restartable=0
  if [[ $3 == mpirun ]]; then
    m=$(grep -m1 -o 'process rank [0-9]* with PID [0-9]* on node [^ ]* exited on signal [0-9]* ([^)]*)' "$log")
    if [[ $m =~ rank\ ([0-9]+)\ .*on\ node\ ([^ ]+)\ exited\ on\ signal\ ([0-9]+)\ \((.*)\) ]]; then
      local r=${BASH_REMATCH[1]}
      failed_host=${rank_host[$r]:-${BASH_REMATCH[2]}}
      reason="rank $r on host $failed_host killed by signal ${BASH_REMATCH[3]} (${BASH_REMATCH[4]})"
      restartable=1
    elif m=$(grep -m1 -o 'Remote daemon: .* on node [^ ]*' "$log"); then
      failed_host=${m##* }
      reason="lost the daemon on host $failed_host"
      restartable=1
    fi
  else
    m=$(grep -m1 -E 'srun: error: [^ ]+: tasks? [0-9,-]+: ' "$log")
    if [[ $m =~ srun:\ error:\ ([^ ]+):\ tasks?\ ([0-9,-]+):\ (.*)$ ]] && [[ ${BASH_REMATCH[3]} != Exited* ]]; then
      failed_host=${BASH_REMATCH[1]}
      reason="task ${BASH_REMATCH[2]} on host $failed_host: ${BASH_REMATCH[3]}"
      restartable=1
    elif m=$(grep -m1 -o 'Node failure on [^ ]*' "$log"); then
      failed_host=${m##* }
      reason="node failure on host $failed_host"
      restartable=1
    fi
  fi
  if ((restartable == 0)); then
    m=$(grep -m1 'error:' "$log")
    reason="exit status $status${m:+: $m}"
  else
    reason="$reason; exit status $status"
  fi
}
