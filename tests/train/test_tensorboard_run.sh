#!/usr/bin/env bash
# `loom train` with log.tensorboard: true on one process: the event file beside metrics.jsonl
# decodes (check_tensorboard.py, independent of loom) to the same scalars at the same steps;
# a resumed run adds a second file, which starts a session at its first step (TensorBoard then
# drops that step and later ones from the earlier file); a fresh run in the same directory
# starts over.
# usage: test_tensorboard_run.sh LOOM_BINARY WORKDIR (Python: $LOOM_PYTHON3, tests/CMakeLists.txt)
set -uo pipefail
loom="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; work="$2"; py="${LOOM_PYTHON3:-python3}"
here="$(cd "$(dirname "$0")" && pwd)"
bin="$(dirname "$loom")"
rm -rf "$work"; mkdir -p "$work/text"; cd "$work"
fail() { echo "FAIL: $1"; [ -f out.txt ] && tail -20 out.txt; [ -f err.txt ] && tail -20 err.txt; exit 1; }
# 20 documents, so that data.split leaves some for validation.
split -n l/20 --additional-suffix=.txt /usr/share/common-licenses/GPL-3 text/gpl_
"$bin/loom-preprocess" --input text --output-prefix corpus --tokenizer bytes --append-eod \
  --workers 1 >/dev/null 2>&1 || fail "loom-preprocess"
cat > tb.yaml <<'YAML'
run: {name: tb, dir: run}
model: {n_layer: 2, n_head: 2, d_model: 32, vocab_size: 257, seq_len: 16}
parallel: {micro_batch_size: 2}
train: {global_batch_size: 4, steps: 6, log_interval: 2, eval_interval: 3, eval_iters: 2}
data: {train: [corpus], split: "90,10,0"}
checkpoint: {dir: ckpt, save_interval: 3, resume: auto}
log: {tensorboard: true, timers: true, peak_flops: 1.0e12}
YAML
start=$(date +%s)
timeout 300 "$loom" train tb.yaml --set train.steps=3 > out.txt 2> err.txt || fail "train exit $?"
out=$("$py" "$here/check_tensorboard.py" run "$start") || { echo "$out"; fail "first run"; }
echo "$out"
for tag in train/loss train/lr train/grad_norm train/tokens_per_s train/mfu \
           train/mem_peak_bytes time/forward time/backward time/optimizer val/loss; do
  grep -q "'$tag'" <<< "$out" || fail "no $tag scalars"
done
first=$(ls run/events.out.tfevents.*)
# Resume to step 6: a second event file; the two together hold every metrics.jsonl scalar.
sleep 1
timeout 300 "$loom" train tb.yaml > out.txt 2> err.txt || fail "resume exit $?"
[ "$(ls run/events.out.tfevents.* | wc -l)" -eq 2 ] || fail "resume did not add an event file"
mkdir -p a b
cp "$first" a/ && cp run/metrics.jsonl a/ && cp run/metrics.jsonl b/
cp "$(ls run/events.out.tfevents.* | grep -vF "$first")" b/
# Each file alone against the lines of its own run (split at the resume event).
"$py" - a b <<'PY' || fail "splitting metrics.jsonl at the resume"
import json, sys
lines = open(sys.argv[1] + "/metrics.jsonl").read().splitlines()
cut = next(i for i, l in enumerate(lines) if json.loads(l).get("event") == "resume")
open(sys.argv[1] + "/metrics.jsonl", "w").write("\n".join(lines[:cut]) + "\n")
open(sys.argv[2] + "/metrics.jsonl", "w").write("\n".join(lines[cut + 1:]) + "\n")
PY
"$py" "$here/check_tensorboard.py" a "$start" || fail "first file after resume"
out=$("$py" "$here/check_tensorboard.py" b "$start") || { echo "$out"; fail "resumed file"; }
echo "$out"
grep -q "^session START at step 4$" <<< "$out" || fail "the resumed file starts no session at step 4"
# A fresh run (no checkpoint) in the same run directory removes the earlier event files.
rm -rf ckpt
timeout 300 "$loom" train tb.yaml --set train.steps=2 > out.txt 2> err.txt || fail "fresh exit $?"
"$py" "$here/check_tensorboard.py" run "$start" || fail "fresh run"
echo "ok   tensorboard event files equal metrics.jsonl (run, resume, fresh run)"
