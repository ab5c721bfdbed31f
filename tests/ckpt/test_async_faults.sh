#!/usr/bin/env bash
# Asynchronous checkpoint faults on the real executable, 4 ranks (dp2 x pp2, ZeRO-1),
# checkpoint.async: true:
#  1. a rank SIGKILLed from inside its writer thread half way through the shard of step 8
#     (LOOM_FAULT_KILL_IN_ASYNC_WRITE=8) leaves step 4 as the newest valid checkpoint, and
#     resume: auto continues from it to the final loss of an uninterrupted run;
#  2. SIGTERM to one rank while a save is being written (LOOM_TEST_ASYNC_WRITE_DELAY_MS delays
#     each write): every rank stops after the same step, the save in flight and then the stop's
#     save are committed, loom exits 75 (stopped early), and the resumed run reaches the
#     uninterrupted final loss;
#  3. a value that is not a bool gives one clear error.
# usage: test_async_faults.sh LOOM_BINARY WORKDIR
set -uo pipefail
loom="$1"; work="$2"
bin="$(dirname "$loom")"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

mkdir -p text && for f in /usr/share/common-licenses/*; do [ -f "$f" ] && cp "$f" "text/$(basename "$f").txt"; done
"$bin/loom-preprocess" --input text --output-prefix corpus --tokenizer bytes --append-eod \
  --workers 1 >/dev/null 2>&1 || fail "loom-preprocess"
cat > cfg.yaml <<'YAML'
run: {name: async_faults, dir: run}
model: {n_layer: 2, n_head: 2, d_model: 32, vocab_size: 257, seq_len: 16}
parallel: {dp: 2, pp: 2, tp: 1, micro_batch_size: 2}
train: {global_batch_size: 8, steps: 12, seed: 5, log_interval: 1}
optimizer: {lr: 0.003, warmup_steps: 2, zero_stage: 1}
data: {train: [corpus]}
checkpoint: {dir: ckpt, save_interval: 4, keep_last: 0, resume: auto, async: true}
YAML
mpi=(mpirun -np 4 --oversubscribe --allow-run-as-root)
last_loss() { grep -o '"loss":[0-9.e+-]*' "$1" | tail -1 | cut -d: -f2; }

# Reference: 12 uninterrupted steps with synchronous saves.
"${mpi[@]}" "$loom" train cfg.yaml --set checkpoint.async=false --set checkpoint.dir=ref \
  --set run.dir=ref_run > ref.log 2>&1 || fail "reference run: $(tail -3 ref.log)"
ref=$(last_loss ref_run/metrics.jsonl)

# 1. Die inside the writer thread, half way through step 8's shard.
LOOM_FAULT_KILL_IN_ASYNC_WRITE=8 "${mpi[@]}" "$loom" train cfg.yaml > kill.log 2>&1 &&
  fail "the killed run exited 0"
grep -q "fault injection: SIGKILL in the checkpoint writer thread, ckpt/step_0000008.tmp/shard_" kill.log ||
  fail "the writer thread was not killed mid-write: $(tail -3 kill.log)"
grep -q "checkpoint saved: ckpt/step_0000004 .*written in the background" kill.log ||
  fail "step 4 was not saved asynchronously: $(grep -i checkpoint kill.log)"
[ -d ckpt/step_0000004 ] || fail "step 4 checkpoint lost"
[ -d ckpt/step_0000008 ] && fail "half-written step 8 checkpoint was committed"
[ "$(cat ckpt/latest)" = step_0000004 ] || fail "latest is $(cat ckpt/latest)"
"${mpi[@]}" "$loom" train cfg.yaml > resume1.log 2>&1 || fail "resume after kill: $(tail -3 resume1.log)"
grep -q "resumed from ckpt/step_0000004" resume1.log || fail "did not resume from step 4: $(grep -i resum resume1.log)"
got=$(last_loss run/metrics.jsonl)
[ "$got" = "$ref" ] || fail "final loss after kill+resume $got != uninterrupted $ref"
[ "$(cat ckpt/latest)" = step_0000012 ] || fail "the resumed run's final save: latest is $(cat ckpt/latest)"
echo "ok: killed in the writer thread mid-write, resumed from step 4, final loss $got == $ref"

# 2. SIGTERM to one rank while saves are in flight (a save every 2 steps, slowed steps).
long=(--set train.steps=40 --set checkpoint.save_interval=2)
"${mpi[@]}" "$loom" train cfg.yaml "${long[@]}" --set checkpoint.async=false --set checkpoint.dir=ref40 \
  --set run.dir=ref40_run > ref40.log 2>&1 || fail "40-step reference: $(tail -3 ref40.log)"
ref=$(last_loss ref40_run/metrics.jsonl)
stop=("${long[@]}" --set checkpoint.dir=ckpt_term --set run.dir=run_term)
# Each write starts 300 ms late and steps last 100 ms more, so a save is always in flight: the
# next save (2 steps later) or the stop commits it.
LOOM_TEST_ASYNC_WRITE_DELAY_MS=300 LOOM_TEST_STEP_SLEEP_MS=100 "${mpi[@]}" "$loom" train cfg.yaml "${stop[@]}" > term.log 2>&1 &
pid=$!
for _ in $(seq 1 600); do [ -d ckpt_term/step_0000006 ] && break; sleep 0.1; done
[ -d ckpt_term/step_0000006 ] || { kill -9 $pid; fail "no checkpoint appeared before SIGTERM"; }
rank=$(pgrep -P $pid | tail -1)
[ -n "$rank" ] || { kill -9 $pid; fail "no rank process under mpirun $pid"; }
kill -TERM "$rank"
wait $pid; rc=$?
[ "$rc" = 75 ] || fail "the run stopped by SIGTERM exited $rc, not 75 (stopped early): $(tail -3 term.log)"
step=$(grep -o 'received SIGTERM: saving a checkpoint and stopping after step [0-9]*' term.log | grep -o '[0-9]*$')
[ -n "$step" ] || fail "no stop message: $(tail -3 term.log)"
[ "$step" -lt 40 ] || fail "SIGTERM arrived only after the last step"
latest=$(cat ckpt_term/latest)
[ "$latest" = "$(printf 'step_%07d' "$step")" ] || fail "latest is $latest, the stop was after step $step"
ls -d ckpt_term/*.tmp 2>/dev/null && fail "an uncommitted save was left behind"
# The save in flight at the stop (an earlier, even step) is committed after the stop message.
sed -n '/received SIGTERM/,$p' term.log | grep -q "checkpoint saved: ckpt_term/step_[0-9]* .*background" ||
  fail "no save committed after the stop: $(grep 'checkpoint saved\|received' term.log)"
after=$(sed -n '/received SIGTERM/,$p' term.log | grep -o 'checkpoint saved: ckpt_term/step_[0-9]*' | head -1 | grep -o '[0-9]*$')
[ "$((10#$after))" -lt "$step" ] || fail "the first save committed after the stop is step $after, not the one in flight"
"${mpi[@]}" "$loom" train cfg.yaml "${stop[@]}" > term_resume.log 2>&1 || fail "resume after SIGTERM: $(tail -3 term_resume.log)"
grep -q "resumed from ckpt_term/$latest" term_resume.log || fail "did not resume from $latest"
got=$(last_loss run_term/metrics.jsonl)
[ "$got" = "$ref" ] || fail "final loss after SIGTERM+resume $got != uninterrupted $ref"
echo "ok: SIGTERM during asynchronous saves stopped every rank after step $step with a committed checkpoint, resumed, final loss $got == $ref"

# 3. Bad value.
"${mpi[@]}" "$loom" train cfg.yaml --set checkpoint.async=sometimes > bad.log 2>&1 && fail "a non-bool accepted"
grep -q "^loom: error: --set: checkpoint.async: expected true or false, got 'sometimes'$" bad.log ||
  fail "message: $(head -3 bad.log)"
[ "$(grep -c 'error' bad.log)" = 1 ] || fail "more than one error line: $(cat bad.log)"
echo "ok: a non-bool checkpoint.async gives one clear error"
echo "1 passed, 0 failed"
