#!/usr/bin/env bash
# Checkpoint fault tests on the real executable, 4 ranks (dp2 x pp2, ZeRO-1):
#  1. a rank SIGKILLed in the middle of a save leaves the previous checkpoint valid, and
#     resume: auto continues from it;
#  2. a corrupted shard is detected by its checksum and skipped with a warning naming the file;
#  3. a job killed mid-run resumes and reaches the same final loss as an uninterrupted run;
#  4. SIGTERM to one rank stops every rank after the same step with a checkpoint and exit 75
#     (stopped early: run again to continue), and the run resumes from it to the same final loss;
#  5. SIGUSR1 while the ranks start (before MPI_Init) stops the run after step 1 the same way.
# After each resume, metrics.jsonl holds every step once, equal to the uninterrupted run's: the
# steps a killed attempt logged after its last checkpoint are dropped when the next one resumes.
# usage: test_faults.sh LOOM_BINARY WORKDIR
set -uo pipefail
loom="$1"; work="$2"
bin="$(dirname "$loom")"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

# A small corpus with the byte tokenizer.
mkdir -p text && for f in /usr/share/common-licenses/*; do [ -f "$f" ] && cp "$f" "text/$(basename "$f").txt"; done
"$bin/loom-preprocess" --input text --output-prefix corpus --tokenizer bytes --append-eod \
  --workers 1 >/dev/null 2>&1 || fail "loom-preprocess"
cat > cfg.yaml <<'YAML'
run: {name: faults, dir: run}
model: {n_layer: 2, n_head: 2, d_model: 32, vocab_size: 257, seq_len: 16}
parallel: {dp: 2, pp: 2, tp: 1, micro_batch_size: 2}
train: {global_batch_size: 8, steps: 12, seed: 5, log_interval: 1}
optimizer: {lr: 0.003, warmup_steps: 2, zero_stage: 1}
data: {train: [corpus]}
checkpoint: {dir: ckpt, save_interval: 4, keep_last: 0, resume: auto}
YAML
mpi=(mpirun -np 4 --oversubscribe --allow-run-as-root)
last_loss() { grep -o '"loss":[0-9.e+-]*' "$1" | tail -1 | cut -d: -f2; }
# step, loss, lr, grad norm and tokens of every train line (same layout: exactly equal).
losses() { grep -o '"step":[0-9]*,"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*,"tokens":[0-9]*' "$1"; }
same_steps() {  # same_steps REF_METRICS METRICS: each step once, equal to the reference's
  diff <(losses "$1") <(losses "$2") > steps.diff ||
    fail "$2 differs from $1 step by step: $(head -4 steps.diff)"
}

# Reference: 12 uninterrupted steps.
"${mpi[@]}" "$loom" train cfg.yaml --set checkpoint.dir=ref --set run.dir=ref_run > ref.log 2>&1 \
  || fail "reference run: $(tail -3 ref.log)"
ref=$(last_loss ref_run/metrics.jsonl)
# log.timers (the default): every logged step carries its time breakdown.
[ "$(grep -c '"loss"' ref_run/metrics.jsonl)" = "$(grep -c '"time":{"forward"' ref_run/metrics.jsonl)" ] ||
  fail "logged steps without a time breakdown: $(head -2 ref_run/metrics.jsonl)"

# 1. Die inside the save of step 8: step 4 must remain, and the run resumes from it.
LOOM_FAULT_KILL_IN_SAVE=8 "${mpi[@]}" "$loom" train cfg.yaml > kill.log 2>&1 && fail "the killed run exited 0"
[ -d ckpt/step_0000004 ] || fail "step 4 checkpoint lost"
[ -d ckpt/step_0000008 ] && fail "half-written step 8 checkpoint was committed"
"${mpi[@]}" "$loom" train cfg.yaml > resume1.log 2>&1 || fail "resume after kill: $(tail -3 resume1.log)"
grep -q "resumed from ckpt/step_0000004" resume1.log || fail "did not resume from step 4: $(grep -i resum resume1.log)"
got=$(last_loss run/metrics.jsonl)
[ "$got" = "$ref" ] || fail "final loss after kill+resume $got != uninterrupted $ref"
grep -q "dropped 4 line(s) after step 4" resume1.log || fail "steps 5-8 of the killed run not dropped"
same_steps ref_run/metrics.jsonl run/metrics.jsonl
echo "ok: killed mid-save, resumed from step 4, final loss $got == $ref, each step logged once"

# 2. Corrupt the newest checkpoint's shard: auto skips it with a warning naming the file.
newest=$(cat ckpt/latest)
shard=$(ls ckpt/"$newest"/shard_*.h5 | head -1)
printf 'garbage' | dd of="$shard" bs=1 seek=4096 conv=notrunc status=none
"${mpi[@]}" "$loom" train cfg.yaml --set train.steps=13 > corrupt.log 2>&1 || fail "resume past a corrupt shard: $(tail -3 corrupt.log)"
grep -q "skipping checkpoint.*$(basename "$shard").*checksum" corrupt.log || fail "no warning naming $shard"
grep -q "resumed from ckpt/step_0000008" corrupt.log || fail "did not fall back to step 8: $(grep -i resum corrupt.log)"
echo "ok: corrupt shard $(basename "$shard") skipped with a warning, resumed from step 8"

# 3. Kill a run mid-training (SIGKILL to every rank after a few steps), resume, same loss.
# (60 steps, so there is time to kill it: its own uninterrupted reference first.)
long=(--set train.steps=60 --set checkpoint.dir=ckpt60 --set run.dir=run60)
"${mpi[@]}" "$loom" train cfg.yaml "${long[@]}" --set checkpoint.dir=ref60 --set run.dir=ref60_run \
  > ref60.log 2>&1 || fail "60-step reference: $(tail -3 ref60.log)"
ref=$(last_loss ref60_run/metrics.jsonl)
"${mpi[@]}" "$loom" train cfg.yaml "${long[@]}" > long.log 2>&1 &
pid=$!
for _ in $(seq 1 600); do [ -d ckpt60/step_0000008 ] && break; sleep 0.1; done
[ -d ckpt60/step_0000008 ] || { kill -9 $pid; fail "no checkpoint appeared"; }
kill -9 $pid; pkill -9 -f "$loom train cfg.yaml" 2>/dev/null; wait $pid 2>/dev/null
[ -d ckpt60/step_0000060 ] && fail "the run finished before it was killed"
"${mpi[@]}" "$loom" train cfg.yaml "${long[@]}" > resume3.log 2>&1 || fail "resume after kill: $(tail -3 resume3.log)"
grep -q "resumed from" resume3.log || fail "did not resume"
got=$(last_loss run60/metrics.jsonl)
[ "$got" = "$ref" ] || fail "final loss after mid-run kill $got != uninterrupted $ref"
same_steps ref60_run/metrics.jsonl run60/metrics.jsonl
echo "ok: killed mid-run, resumed, final loss $got == $ref, each step logged once"

# 4. SIGTERM to one rank (the last child of mpirun) mid-run: a clean stop with a checkpoint.
stop=(--set train.steps=60 --set checkpoint.dir=ckpt_term --set run.dir=run_term)
"${mpi[@]}" "$loom" train cfg.yaml "${stop[@]}" > term.log 2>&1 &
pid=$!
for _ in $(seq 1 600); do [ -d ckpt_term/step_0000008 ] && break; sleep 0.1; done
[ -d ckpt_term/step_0000008 ] || { kill -9 $pid; fail "no checkpoint appeared before SIGTERM"; }
rank=$(pgrep -P $pid | tail -1)
[ -n "$rank" ] || { kill -9 $pid; fail "no rank process under mpirun $pid"; }
kill -TERM "$rank"
wait $pid; rc=$?
[ "$rc" = 75 ] || fail "the run stopped by SIGTERM exited $rc, not 75 (stopped early): $(tail -3 term.log)"
step=$(grep -o 'received SIGTERM: saving a checkpoint and stopping after step [0-9]*' term.log | grep -o '[0-9]*$')
[ -n "$step" ] || fail "no stop message: $(tail -3 term.log)"
[ "$step" -lt 60 ] || fail "SIGTERM arrived only after the last step"
latest=$(cat ckpt_term/latest)
[ "$latest" = "$(printf 'step_%07d' "$step")" ] || fail "latest is $latest, the stop was after step $step"
"${mpi[@]}" "$loom" train cfg.yaml "${stop[@]}" > term_resume.log 2>&1 || fail "resume after SIGTERM: $(tail -3 term_resume.log)"
grep -q "resumed from ckpt_term/$latest" term_resume.log || fail "did not resume from $latest"
got=$(last_loss run_term/metrics.jsonl)
[ "$got" = "$ref" ] || fail "final loss after SIGTERM+resume $got != uninterrupted $ref"
same_steps ref60_run/metrics.jsonl run_term/metrics.jsonl
echo "ok: SIGTERM to one rank stopped every rank after step $step with a checkpoint and exit 75, resumed, final loss $got == $ref"

# 5. SIGUSR1 during start-up, before MPI_Init (a test hook holds every rank 3 s there): the
# request is kept until the first step, which is saved, and the job exits 75. Sent once the rank
# catches SIGUSR1 (bit 10 of SigCgt), which is before the pause and after any re-exec of loom.
early=(--set train.steps=60 --set checkpoint.dir=ckpt_early --set run.dir=run_early)
LOOM_TEST_START_DELAY_MS=3000 "${mpi[@]}" "$loom" train cfg.yaml "${early[@]}" > early.log 2>&1 &
pid=$!
rank=""
for _ in $(seq 1 200); do
  rank=$(pgrep -P $pid | tail -1)
  mask=$(awk '/^SigCgt:/ {print $2}' "/proc/$rank/status" 2> /dev/null)
  [ -n "$mask" ] && (((0x$mask >> 9) & 1)) && break
  rank=""
  sleep 0.01
done
[ -n "$rank" ] || { kill -9 $pid; fail "no rank of mpirun $pid came to catch SIGUSR1"; }
kill -USR1 "$rank"
wait $pid; rc=$?
[ "$rc" = 75 ] || fail "SIGUSR1 in start-up: exit $rc, not 75 (stopped early): $(tail -3 early.log)"
grep -q "received SIGUSR1: saving a checkpoint and stopping after step 1$" early.log ||
  fail "SIGUSR1 in start-up: no stop after step 1: $(tail -3 early.log)"
[ "$(cat ckpt_early/latest)" = step_0000001 ] || fail "SIGUSR1 in start-up: latest is $(cat ckpt_early/latest)"
echo "ok: SIGUSR1 before MPI_Init stopped the run after step 1 with a checkpoint and exit 75"

# Bad input: a resume path that does not exist, and a meta.json that does not parse.
"${mpi[@]}" "$loom" train cfg.yaml --set checkpoint.resume=nowhere/step_1 > bad1.log 2>&1 && fail "missing path accepted"
grep -q "checkpoint.resume: 'nowhere/step_1' does not exist" bad1.log || fail "message: $(cat bad1.log | head -3)"
echo "{" > ckpt/"$(cat ckpt/latest)"/meta.json
"${mpi[@]}" "$loom" train cfg.yaml --set checkpoint.resume=ckpt/$(cat ckpt/latest) > bad2.log 2>&1 && fail "broken meta.json accepted"
grep -q "meta.json' does not parse" bad2.log || fail "message: $(head -3 bad2.log)"
echo "ok: bad resume inputs give one clear error"
echo "1 passed, 0 failed"
