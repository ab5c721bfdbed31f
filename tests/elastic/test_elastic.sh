#!/usr/bin/env bash
# Elastic restart on the real executable: an 8-rank dp2 x pp2 x tp2 job on two hosts of 4 slots
# (labels for groups of slots on this machine: elastic.sh --local-hosts) loses rank 5 (host B)
# to SIGKILL at step 7; scripts/elastic.sh restarts it on host A's 4 ranks with the layout
# loom plan chooses, from the step-4 checkpoint. Checked: the restart and resume events, every
# sample read exactly once per step across both attempts (LOOM_TRACE_SAMPLES), the losses
# against an uninterrupted 8-rank run, and the one-line errors of bad input.
# usage: test_elastic.sh LOOM_BINARY WORKDIR SOURCE_DIR
set -uo pipefail
loom="$(realpath "$1")"; work="$2"; src="$(realpath "$3")"
bin="$(dirname "$loom")"
elastic=("$src/scripts/elastic.sh" --loom "$loom")
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
export OMPI_MCA_mpi_yield_when_idle=1  # 8 ranks on 2 cores: waiting ranks yield

mkdir -p text && for f in /usr/share/common-licenses/*; do [ -f "$f" ] && cp "$f" "text/$(basename "$f").txt"; done
"$bin/loom-preprocess" --input text --output-prefix corpus --tokenizer bytes --append-eod \
  --workers 1 > /dev/null 2>&1 || fail "loom-preprocess"
G=16 steps=12
cat > cfg.yaml << YAML
run: {name: elastic, dir: run}
model: {n_layer: 4, n_head: 2, d_model: 32, vocab_size: 257, seq_len: 16}
parallel: {dp: 2, pp: 2, tp: 2, micro_batch_size: 2}
train: {global_batch_size: $G, steps: $steps, seed: 5, log_interval: 1}
optimizer: {lr: 0.003, warmup_steps: 2, zero_stage: 1}
data: {train: [corpus]}
checkpoint: {dir: ckpt, save_interval: 4, keep_last: 0}
YAML
# What loom plan models: two hosts of 4 cpu ranks (the hostfile's).
cat > cluster.yaml << 'YAML'
name: two hosts of 4 cpu ranks
device: cpu
nodes: 2
gpus_per_node: 4
gpu_memory_gib: 2
peak_flops: 50e9
intra_node: {bandwidth_gbps: 40, latency_us: 1}
inter_node: {bandwidth_gbps: 10, latency_us: 50}
YAML
printf 'hostA slots=4\nhostB slots=4\n' > hosts

# The uninterrupted 8-rank run.
start=$(date +%s)
mpirun -np 8 --oversubscribe --allow-run-as-root "$loom" train cfg.yaml \
  --set run.dir=ref_run --set checkpoint.dir=ref_ckpt > ref.log 2>&1 || fail "reference: $(tail -3 ref.log)"
ref_s=$(($(date +%s) - start))

# The elastic run: rank 5 dies at the start of step 7 (after the step-4 checkpoint).
start=$(date +%s)
LOOM_FAULT_KILL_RANK=5:7 LOOM_TRACE_SAMPLES="$work/trace" timeout 600 "${elastic[@]}" \
  --hostfile hosts --local-hosts --cluster cluster.yaml --max-restarts 2 cfg.yaml > elastic.log 2>&1
rc=$?
el_s=$(($(date +%s) - start))
[ $rc = 124 ] && fail "elastic.sh hung (10 min): $(tail -5 elastic.log)"
[ $rc = 0 ] || fail "elastic.sh exited $rc: $(tail -5 elastic.log)"
grep -q "attempt 0 failed: rank 5 on host hostB killed by signal 9" elastic.log ||
  fail "no failure line naming rank 5 and hostB: $(grep elastic.sh elastic.log)"
grep -q "attempt 1: 4 ranks on hostA with" elastic.log || fail "no 4-rank restart on hostA: $(grep elastic.sh elastic.log)"
grep -q "attempt 1 finished" elastic.log || fail "the restart did not finish"

# metrics.jsonl: a restart event (attempt, reason, ranks, a 4-rank layout keeping G), then the
# resume event at step 4, then steps 5..12.
ev=$(grep '"event":"restart"' run/metrics.jsonl)
[ "$(echo "$ev" | wc -l)" = 1 ] || fail "expected one restart event, got: $ev"
num() { echo "$ev" | grep -o "\"$1\":[0-9]*" | head -1 | cut -d: -f2; }
[ "$(num attempt)" = 1 ] && [ "$(num ranks)" = 4 ] && [ "$(num step)" = 4 ] ||
  fail "restart event fields: $ev"
echo "$ev" | grep -q '"reason":"rank 5 on host hostB killed by signal 9 (Killed); exit status 137"' ||
  fail "restart reason: $ev"
echo "$ev" | grep -q '"hosts":"hostA"' || fail "restart hosts: $ev"
dp=$(num dp) pp=$(num pp) tp=$(num tp) cp=$(num cp) mb=$(num micro_batch_size) m=$(num microbatches)
[ $((dp * pp * tp * cp)) = 4 ] || fail "restart layout is not 4 ranks: $ev"
[ $((dp * mb * m)) = $G ] || fail "restart layout does not keep the global batch $G: $ev"
after=$(grep -A1 '"event":"restart"' run/metrics.jsonl | tail -1)
echo "$after" | grep -q '"event":"resume","step":4' || fail "no resume event at step 4 after the restart: $after"

# Every step of the final model read the global batch [ (s-1)G, sG ) exactly once per data-parallel
# replica: attempt 0 up to its checkpoint (step 4), attempt 1 from step 5 on. The ranks of one
# replica (pp, tp) read the same rows: deduplicated by (step, dp, first).
check_trace() {
  awk -v G=$G -v K=4 -v S=$steps '
  { a = $2; s = $4; d = $8; f = $10; n = $12 }
  a == 1 && s <= K { print "FAIL: attempt 1 read step " s " (at or before the checkpoint)"; bad = 1 }
  (a == 0 && s <= K) || a == 1 {
    key = s " " d " " f
    if (key in seen) { if (seen[key] != n) { print "FAIL: rows differ within replica " key; bad = 1 } next }
    seen[key] = n
    for (i = f; i < f + n; ++i) { c[s, i]++ }
  }
  END {
    for (s = 1; s <= S; ++s)
      for (i = 0; i < S * G + G; ++i) {
        want = (i >= (s - 1) * G && i < s * G) ? 1 : 0
        if (c[s, i] + 0 != want) { print "FAIL: step " s " sample " i " read " c[s, i] + 0 " times"; bad = 1 }
      }
    exit bad
  }' "$1"
}
check_trace trace || fail "sample trace"
# The check can fail: one micro-batch of step 9 read one sample further on.
awk '$4 == 9 && $8 == 1 && !done { $10 += 1; done = 1 } { print }' trace > trace_shifted
check_trace trace_shifted > /dev/null && fail "a shifted micro-batch passed the trace check"
grep -q '^attempt 0 step 7 rank 5 ' trace && fail "rank 5 should have died before reading step 7"
echo "ok: every sample of steps 1..$steps read once across the restart ($(wc -l < trace) trace lines)"

# Losses. Steps 1..4 ran on the reference's layout before the fault: bitwise equal. Steps 5..12
# ran on the new layout, which reorders sums: the reorder class of docs/testing.md, 1e-3
# relative (a rounding-level difference in the loaded state grows along the trajectory; over
# 12 seeds x 3 layouts of this model family the largest drift by step 10 was 2.1e-4).
loss_of() { grep "^{\"step\":$2," "$1" | tail -1 | grep -o '"loss":[0-9.e+-]*' | cut -d: -f2; }
worst=0
for s in $(seq 1 $steps); do
  r=$(loss_of ref_run/metrics.jsonl "$s") e=$(loss_of run/metrics.jsonl "$s")
  [ -n "$r" ] && [ -n "$e" ] || fail "step $s missing (ref '$r', elastic '$e')"
  if [ "$s" -le 4 ]; then
    [ "$r" = "$e" ] || fail "step $s before the fault: $e != $r"
  else
    worst=$(awk -v a="$e" -v b="$r" -v w="$worst" 'BEGIN { d = (a - b) / b; d = d < 0 ? -d : d; print (d > w ? d : w) }')
  fi
done
awk -v w="$worst" 'BEGIN { exit !(w <= 1e-3) }' || fail "steps 5..$steps: relative loss difference $worst > 1e-3"
echo "ok: steps 1..4 bitwise, steps 5..$steps within $worst relative (bound 1e-3); reference ${ref_s}s, elastic ${el_s}s"
echo "ok: restart event $ev"

# loom plan --ranks N --layout-args: the largest world of at most N ranks that is whole nodes
# of the cluster file (or one node of fewer) and has a fitting layout.
w=$("$loom" plan cfg.yaml --cluster cluster.yaml --ranks 7 --layout-args) || fail "plan --ranks 7"
[ "${w%% *}" = 4 ] || fail "--ranks 7 on nodes of 4 should plan 4 ranks: $w"
w=$("$loom" plan cfg.yaml --cluster cluster.yaml --ranks 3 --layout-args) || fail "plan --ranks 3"
g() { echo "$w" | grep -o "parallel.$1=[0-9]*" | cut -d= -f2; }
[ "${w%% *}" = 3 ] && [ $(($(g dp) * $(g pp) * $(g tp) * $(g cp))) = 3 ] || fail "--ranks 3: $w"
echo "ok: loom plan --layout-args: --ranks 7 -> 4 ranks, --ranks 3 -> $w"

# Bad input: one line each, exit 2, nothing launched.
bad() {  # expected-message args...
  local want="$1"; shift
  "${elastic[@]}" "$@" > bad.log 2>&1 && fail "accepted: $*"
  [ "$(wc -l < bad.log)" = 1 ] || fail "more than one line for $*: $(cat bad.log)"
  grep -q -- "$want" bad.log || fail "message for $*: $(cat bad.log)"
}
bad "missing CONFIG.yaml" --hostfile hosts
bad "config 'nope.yaml' not found" --hostfile hosts nope.yaml
bad "max-restarts: expected a whole number 0..1000, got 'x'" --hostfile hosts --max-restarts x cfg.yaml
printf 'hostA slots=four\n' > badhosts
bad "badhosts:1: expected 'host slots=K' with K >= 1" --hostfile badhosts cfg.yaml
env -u SLURM_JOB_ID "${elastic[@]}" cfg.yaml > bad.log 2>&1 && fail "no hosts accepted"
grep -q "no hosts: give --hostfile FILE" bad.log || fail "no-hosts message: $(cat bad.log)"
bad "unknown key 'train.stepz'" --hostfile hosts cfg.yaml --set train.stepz=3
sed 's/gpu_memory_gib: 2/gpu_memory_gib: 0.0001/' cluster.yaml > tiny.yaml
bad "loom plan for at most 8 ranks: .*no layout of 8 or fewer ranks" --hostfile hosts --cluster tiny.yaml cfg.yaml
# The only host fails: nothing remains to restart on (exit 3, after the failed attempt).
printf 'solo slots=2\n' > solo
LOOM_FAULT_KILL_RANK=1:1 "${elastic[@]}" --hostfile solo --local-hosts cfg.yaml --set parallel.dp=1 \
  --set parallel.tp=1 --set checkpoint.dir=ckpt_solo --set run.dir=run_solo > solo.log 2>&1
[ $? = 3 ] || fail "expected exit 3 when no host remains: $(tail -3 solo.log)"
grep -q "no hosts remain" solo.log || fail "no-hosts-remain message: $(grep elastic.sh solo.log)"
# A malformed fault variable is loom's start-up error naming it.
LOOM_FAULT_KILL_RANK=5 "$loom" train cfg.yaml --set parallel.dp=1 --set parallel.pp=1 \
  --set parallel.tp=1 --set run.dir=run_env > env.log 2>&1 && fail "LOOM_FAULT_KILL_RANK=5 accepted"
grep -q "loom: error: LOOM_FAULT_KILL_RANK='5': expected RANK:STEP" env.log || fail "env message: $(tail -2 env.log)"
# A loom error (here missing data) is not restarted: the next attempt would meet it again.
"${elastic[@]}" --hostfile solo --local-hosts cfg.yaml --set parallel.dp=1 --set parallel.pp=1 \
  --set data.train=[nowhere] --set run.dir=run_nodata > nodata.log 2>&1
rc=$?
[ $rc = 1 ] || fail "expected loom's exit status 1 for missing data, got $rc: $(tail -3 nodata.log)"
grep -q "attempt 0 failed: exit status 1: loom: error: .*nowhere.*; not restarted" nodata.log ||
  fail "not-restarted message: $(grep elastic.sh nodata.log)"
grep -q "attempt 1" nodata.log && fail "a loom error was restarted"
echo "ok: bad input gives one clear line each; a loom error is not restarted"
echo "1 passed, 0 failed"
