#!/usr/bin/env bash
# scripts/slurm/loom.sbatch on the two-node test cluster, dp2 x pp2 x tp2 over 2 nodes x 4 tasks:
#  1. an uninterrupted job reaches its last step; the rank map shows 2 hosts, tp inside each;
#  2. the same job with --time=2 outlasts its limit: SIGUSR1 is forwarded to loom, which saves a
#     checkpoint; the job requeues itself and finishes, with every step's loss, lr, grad norm
#     and tokens equal to job 1's (same layout, so exactly equal), each step logged once.
# One job after the other: 16 ranks on 2 cores at once would make each step 5x slower.
# usage: test_sbatch.sh LOOM_BINARY WORKDIR SOURCE_DIR
set -uo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "$0")/lib.sh"
slurm_setup "$@"
make_corpus
# Slurm sends SIGUSR1 once the time left is under the asked 30 s + 30 s, at its next check
# (every 30 s): 60-90 s into each attempt of a 2-minute job. The time-limited job sleeps 200 ms
# after each step (LOOM_TEST_STEP_SLEEP_MS, a test hook), so its 600 steps take over 120 s
# however fast the machine: it always outlasts the first signal (the numbers do not change),
# and a second or third attempt finishes them. Every rank sleeps at the same point of each step,
# so the job leaves the cores idle most of the time (CI builds the sanitizer suite beside it;
# 2400 steps with 30 ms sleeps used to take that build's CPU for about 4 minutes).
steps="${LOOM_SLURM_TEST_STEPS:-600}"
common=(-N2 --ntasks-per-node=4 scripts/slurm/loom.sbatch configs/tiny.yaml
  --set data.train="[$work/corpus]" --set parallel.dp=2 --set parallel.pp=2 --set parallel.tp=2
  --set train.global_batch_size=8 --set train.steps="$steps" --set checkpoint.keep_last=1)
echo "uninterrupted job ($steps steps)"
t0=$SECONDS
read -r ref s_ref < <(run_job ref 300 "${common[@]}")
[ "$s_ref" = COMPLETED ] || fail "job $ref ended $s_ref:"$'\n'"$(job_story "$work/ref-$ref.out")"
echo "uninterrupted job: COMPLETED after $((SECONDS - t0)) s"
out="$work/ref-$ref.out"
grep -q "step $steps/$steps" "$out" || grep -q "\"step\":$steps," "$work/ref_run/metrics.jsonl" ||
  fail "job $ref did not reach step $steps"
grep -q "8 ranks on 2 hosts" "$out" || fail "no '8 ranks on 2 hosts' in $out: $(grep -m1 ranks "$out")"
# The rank map rows: rank host gpu dp pp tp local-rank. 4 ranks per host, and every tp group
# (the ranks sharing dp and pp) on a single host.
map=$(sed 's/^\[loom [^]]*\] *//' "$out" | awk '$1 ~ /^[0-7]$/ && ($2 == "n1" || $2 == "n2") && NF == 7' |
  head -8)
echo "$map"
[ "$(echo "$map" | awk '$2 == "n1"' | wc -l)" = 4 ] || fail "rank map: not 4 ranks on n1"
[ "$(echo "$map" | awk '$2 == "n2"' | wc -l)" = 4 ] || fail "rank map: not 4 ranks on n2"
split=$(echo "$map" | awk '{h[$4 "," $5] = h[$4 "," $5] " " $2} END {for (k in h) print k ":" h[k]}' |
  awk '{for (i = 3; i <= NF; i++) if ($i != $2) print}')
[ -z "$split" ] || fail "a tp group spans hosts: $split"
echo "ok: 8 ranks on 2 hosts, 4 per node, tp innermost, no cross-host tp warning"

echo "the same with --time=2"
t1=$SECONDS
read -r timed s_timed < <(export LOOM_TEST_STEP_SLEEP_MS="${LOOM_TEST_STEP_SLEEP_MS:-200}"
  run_job timed 450 --time=2 --signal=B:USR1@30 "${common[@]}")
out="$work/timed-$timed.out"
[ "$s_timed" = COMPLETED ] || fail "job $timed ended $s_timed:"$'\n'"$(job_story "$out")"
restarts=$(job_field "$timed" Restarts)
echo "--time=2 job: COMPLETED after $((SECONDS - t1)) s, $restarts restart(s)"
[ "${restarts:-0}" -ge 1 ] || fail "job $timed was never requeued (raise LOOM_TEST_STEP_SLEEP_MS)"
grep -q "received SIGUSR1 (time limit near): forwarding" "$out" || fail "batch shell got no SIGUSR1"
grep -q "received SIGUSR1: saving a checkpoint and stopping after step" "$out" ||
  fail "loom did not stop on the forwarded SIGUSR1"
grep -q "requeueing this job (restart 1 of at most" "$out" || fail "no requeue line in $out"
grep -q "attempt 2 (restart 1 of at most" "$out" || fail "no second attempt in $out"
grep -q "loom finished: train.steps done" "$out" || fail "no final 'train.steps done' in $out"
grep -qi "nan" <(grep -E "time per step|done:" "$out") && fail "nan in the summary: $(grep -i nan "$out")"
stopped=$(grep -o "stopping after step [0-9]*" "$out" | head -1 | grep -o "[0-9]*$")
echo "ok: SIGUSR1 forwarded, checkpoint at step $stopped, requeued, resumed, finished"

losses "$work/ref_run/metrics.jsonl" > "$work/ref.losses"
losses "$work/timed_run/metrics.jsonl" > "$work/timed.losses"
[ "$(wc -l < "$work/ref.losses")" = "$steps" ] || fail "reference metrics: not $steps steps"
[ "$(cut -d' ' -f1 "$work/timed.losses" | sort -n | uniq -d)" = "" ] ||
  fail "a step is logged twice in the requeued run's metrics"
diff "$work/ref.losses" "$work/timed.losses" > "$work/losses.diff" ||
  fail "requeued run differs from the uninterrupted one: $(head -4 "$work/losses.diff")"
echo "ok: $steps steps, loss/lr/grad_norm/tokens equal step by step across the requeue (stopped at $stopped)"
# Each restart is a line of metrics.jsonl: the step it resumed at, and Slurm's restart count.
python3 - "$work/timed_run/metrics.jsonl" "$stopped" "$timed" <<'PY' || fail "no resume event in the requeued run's metrics"
import json, sys
events = [j for j in map(json.loads, open(sys.argv[1])) if j.get("event") == "resume"]
first = events[0] if events else {}
ok = (first.get("step") == int(sys.argv[2]) and first.get("slurm_restart") == 1
      and first.get("slurm_job") == sys.argv[3] and first.get("checkpoint"))
print("resume events:", events)
sys.exit(0 if ok else 1)
PY
echo "ok: the restart is in metrics.jsonl"
