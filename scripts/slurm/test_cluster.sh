#!/usr/bin/env bash
# A two-node Slurm test cluster on one machine (nodes n1, n2 over loopback): start|stop|status|env.
#   scripts/slurm/test_cluster.sh start    # idempotent; installs the Debian packages if missing
#   eval "$(scripts/slurm/test_cluster.sh env)"   # SLURM_CONF for sbatch/srun/salloc/squeue
#   scripts/slurm/test_cluster.sh stop
# Needs root (slurmd runs as root, each in its own UTS + mount namespace so it has its own
# hostname and its own PMIx scratch folder). Everything it writes is under LOOM_SLURM_DIR
# (default /tmp/loom-slurm), except: /etc/hosts gets one line "127.0.0.1 n1 n2" (added once),
# and munge uses the system key /etc/munge/munge.key (made if missing) and its daemon.
set -euo pipefail

DIR="${LOOM_SLURM_DIR:-/tmp/loom-slurm}"
CONF="$DIR/etc/slurm.conf"
NODES=(n1 n2)
CPUS="${LOOM_SLURM_CPUS:-8}" # CPUs each node declares (more than the machine has: tests oversubscribe)
CTLD_PORT=16817
HOSTS_LINE="127.0.0.1 n1 n2 # loom Slurm test cluster (scripts/slurm/test_cluster.sh)"

say() { echo "test_cluster: $*"; }
die() {
  echo "test_cluster: error: $*" >&2
  exit 1
}

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (slurmd and munged run as root here)"; }

install_packages() {
  local missing=()
  for b in slurmctld slurmd sbatch munged; do command -v "$b" > /dev/null || missing+=("$b"); done
  [ ${#missing[@]} = 0 ] && return 0
  command -v apt-get > /dev/null || die "missing ${missing[*]} and no apt-get: install Slurm and munge"
  say "installing slurmctld slurmd slurm-client munge (missing: ${missing[*]})"
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurmctld slurmd \
    slurm-client munge; } > "$DIR/log/apt.log" 2>&1 || die "apt-get install failed; see $DIR/log/apt.log"
}

start_munge() {
  if munge -n 2> /dev/null | unmunge > /dev/null 2>&1; then return 0; fi
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /etc/munge/munge.key /run/munge /var/lib/munge /var/log/munge
  chmod 400 /etc/munge/munge.key
  munged --force || die "munged did not start; see /var/log/munge/munged.log"
  for _ in 1 2 3 4 5; do
    munge -n 2> /dev/null | unmunge > /dev/null 2>&1 && return 0
    sleep 1
  done
  die "munge does not answer; see /var/log/munge/munged.log"
}

add_hosts() {
  getent hosts n1 > /dev/null && getent hosts n2 > /dev/null && return 0
  grep -qF "$HOSTS_LINE" /etc/hosts || echo "$HOSTS_LINE" >> /etc/hosts
}

write_conf() {
  mkdir -p "$DIR/etc" "$DIR/state" "$DIR/spool" "$DIR/run" "$DIR/log" "$DIR/pmix"
  for n in "${NODES[@]}"; do mkdir -p "$DIR/spool/$n" "$DIR/$n/pmix"; done
  local host
  host="$(hostname -s)"
  cat > "$CONF" << EOF
# Written by scripts/slurm/test_cluster.sh: two slurmd (n1, n2) on one machine.
ClusterName=loomtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire: a requeued job waits this long before it may start again (default 120 s).
AuthInfo=cred_expire=10
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
PlugStackConfig=$DIR/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
MpiDefault=none
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
KillWait=10
MinJobAge=600
InactiveLimit=0
NodeName=n1 NodeAddr=127.0.0.1 NodeHostname=n1 Port=17001 CPUs=$CPUS State=UNKNOWN
NodeName=n2 NodeAddr=127.0.0.1 NodeHostname=n2 Port=17002 CPUs=$CPUS State=UNKNOWN
PartitionName=loom Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
EOF
  # Every slurmstepd creates its PMIx folder here; each slurmd bind-mounts its own folder over it.
  echo "PMIxCliTmpDirBase=$DIR/pmix" > "$DIR/etc/mpi.conf"
  : > "$DIR/etc/plugstack.conf"
}

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2> /dev/null; }

nodes_idle() {
  local s
  s="$(SLURM_CONF="$CONF" sinfo -h -N -o '%N %t' 2> /dev/null | sort -u | tr '\n' ' ')"
  [[ "$s" =~ n1\ (idle|mix|alloc) ]] && [[ "$s" =~ n2\ (idle|mix|alloc) ]]
}

running() {
  pid_alive "$DIR/run/slurmctld.pid" && pid_alive "$DIR/run/slurmd-n1.pid" &&
    pid_alive "$DIR/run/slurmd-n2.pid" && nodes_idle
}

start() {
  need_root
  if running; then
    say "already running (SLURM_CONF=$CONF)"
    return 0
  fi
  stop_daemons
  local port
  for port in "$CTLD_PORT" 17001 17002; do
    if ss -Htln "sport = :$port" 2> /dev/null | grep -q .; then
      die "port $port is in use (another test cluster under another LOOM_SLURM_DIR?): stop it first"
    fi
  done
  mkdir -p "$DIR/log"
  install_packages
  start_munge
  add_hosts
  write_conf
  export SLURM_CONF="$CONF"
  slurmctld -i || die "slurmctld did not start; see $DIR/log/slurmctld.log"
  for n in "${NODES[@]}"; do
    unshare --uts --mount --propagation private bash -c \
      "hostname $n && mount --bind '$DIR/$n/pmix' '$DIR/pmix' && exec slurmd -N $n" ||
      die "slurmd $n did not start; see $DIR/log/slurmd-$n.log"
  done
  for _ in $(seq 30); do
    if nodes_idle; then
      say "running: nodes n1 n2 up (SLURM_CONF=$CONF; logs in $DIR/log)"
      return 0
    fi
    sleep 1
  done
  SLURM_CONF="$CONF" sinfo -N >&2 || true
  die "nodes n1 n2 not up after 30 s; see $DIR/log/slurmctld.log, $DIR/log/slurmd-n1.log, $DIR/log/slurmd-n2.log"
}

stop_daemons() {
  local f
  for f in "$DIR"/run/slurmd-n1.pid "$DIR"/run/slurmd-n2.pid "$DIR"/run/slurmctld.pid; do
    if pid_alive "$f"; then
      kill "$(cat "$f")"
      for _ in $(seq 20); do
        pid_alive "$f" || break
        sleep 0.5
      done
    fi
    rm -f "$f"
  done
}

case "${1:-}" in
  start) start ;;
  stop)
    need_root
    stop_daemons
    say "stopped (munged left running; state and logs kept in $DIR)"
    ;;
  status)
    if running; then
      say "running (SLURM_CONF=$CONF)"
      SLURM_CONF="$CONF" sinfo -N
    else
      say "not running"
      exit 1
    fi
    ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) die "usage: $0 start|stop|status|env" ;;
esac
