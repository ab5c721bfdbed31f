#!/usr/bin/env bash
# Two jobs pointed at one checkpoint directory, on the real executable: while job A (2 ranks)
# trains, job B (one process, then 2 ranks) stops with the lock error naming A, before it
# writes anything; after A is killed by SIGKILL no stale lock remains, and job C resumes from
# A's newest checkpoint, which B did not touch.
# usage: test_lock.sh LOOM_BINARY WORKDIR
set -uo pipefail
loom="$1"; work="$2"
bin="$(dirname "$loom")"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
a=""
stop_a() {  # SIGKILL job A: its ranks (children of mpirun), then mpirun
  [ -n "$a" ] || return 0
  pkill -9 -P "$a" 2>/dev/null; kill -9 "$a" 2>/dev/null; wait "$a" 2>/dev/null; a=""
}
fail() { echo "FAIL: $*"; stop_a; exit 1; }

mkdir -p text && cp /usr/share/common-licenses/GPL-3 text/gpl.txt
"$bin/loom-preprocess" --input text --output-prefix corpus --tokenizer bytes --append-eod \
  --workers 1 >/dev/null 2>&1 || fail "loom-preprocess"
cat > cfg.yaml <<'YAML'
run: {name: lock, dir: run_a}
model: {n_layer: 1, n_head: 2, d_model: 32, vocab_size: 257, seq_len: 16}
parallel: {micro_batch_size: 2}
train: {global_batch_size: 4, steps: 1000000, log_interval: 50}
data: {train: [corpus]}
checkpoint: {dir: ck, save_interval: 5, keep_last: 2, resume: auto}
YAML
mpi=(mpirun -np 2 --oversubscribe --allow-run-as-root)

"${mpi[@]}" "$loom" train cfg.yaml > a.log 2>&1 &
a=$!
# `latest`, not step_0000005: with save_interval 5 and keep_last 2 that directory is pruned
# when step 15 is saved, which can come before the next poll.
for _ in $(seq 1 600); do [ -s ck/latest ] && break; sleep 0.2; done
[ -s ck/latest ] || fail "job A wrote no checkpoint: $(tail -3 a.log)"

want="checkpoint.dir 'ck' is in use by another run (pid "
timeout 60 "$loom" train cfg.yaml --set run.dir=run_b > b1.log 2>&1
rc=$?
{ [ $rc -ne 0 ] && [ $rc -ne 124 ]; } || fail "job B (1 process) exited $rc"
grep -qF "$want" b1.log || fail "job B's error: $(tail -3 b1.log)"
timeout 60 "${mpi[@]}" "$loom" train cfg.yaml --set run.dir=run_b > b2.log 2>&1
rc=$?
{ [ $rc -ne 0 ] && [ $rc -ne 124 ]; } || fail "job B (2 ranks) exited $rc"
grep -qF "$want" b2.log || fail "job B's error (2 ranks): $(tail -3 b2.log)"
grep -q "checkpoint saved\|resumed from" b1.log b2.log && fail "job B read or wrote checkpoints"
[ -e run_b ] && fail "job B wrote its run directory"
echo "ok: a second job on ck stops with: $(grep -F "$want" b1.log | head -1)"

stop_a
# resume: auto takes the newest complete step directory. `latest` can lag it by one save: A
# may have been killed between renaming a finished step directory into place and rewriting
# `latest`.
latest=$(cd ck && ls -d step_??????? | sort | tail -1)
[ -n "$latest" ] || fail "no step directory left by job A"
step=$((10#${latest#step_}))
"$loom" train cfg.yaml --set run.dir=run_c --set train.steps=$((step + 2)) > c.log 2>&1 \
  || fail "job C after A was killed: $(tail -3 c.log)"
grep -q "resumed from ck/$latest" c.log || fail "job C did not resume from $latest: $(grep -i resum c.log)"
echo "ok: job A killed by SIGKILL left no stale lock; job C resumed from $latest"
echo "1 passed, 0 failed"
