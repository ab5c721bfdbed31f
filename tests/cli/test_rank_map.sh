#!/usr/bin/env bash
# Start-up rank map of `loom train` under mpirun: rank 0 prints one row per rank (rank, host, GPU,
# dp/pp/tp, node-local rank), once; parallel.strict_topology: true passes on one host.
# usage: test_rank_map.sh LOOM_BINARY WORKDIR
set -uo pipefail
loom="$1"; work="$2"
bin="$(dirname "$loom")"
rm -rf "$work"; mkdir -p "$work/text"; cd "$work"
cp /usr/share/common-licenses/GPL-3 text/gpl.txt
"$bin/loom-preprocess" --input text --output-prefix good --tokenizer bytes --append-eod --workers 1 >/dev/null 2>&1
cat > ok.yaml <<'YAML'
run: {name: rank_map}
model: {n_layer: 2, n_head: 2, d_model: 32, vocab_size: 257, seq_len: 16}
parallel: {micro_batch_size: 2, tp: 2, pp: 2, strict_topology: true}
train: {global_batch_size: 4, steps: 1}
data: {train: [good]}
YAML
timeout 120 mpirun -np 4 --oversubscribe --allow-run-as-root "$loom" train ok.yaml > out.txt 2> err.txt
rc=$?
fail() { echo "FAIL: $1"; echo "--- stdout"; head -20 out.txt; echo "--- stderr"; head -20 err.txt; exit 1; }
[ $rc -eq 0 ] || fail "exit $rc"
host=$(hostname)
want=(
  "grid dp1 x pp2 x tp2 = 4 ranks on 1 host, rank order tp-dp-pp (first axis innermost)"
  "  rank  host"
  "  gpu  dp  pp  tp  local rank"
)
for w in "${want[@]}"; do grep -qF -- "$w" out.txt || fail "stdout lacks '$w'"; done
# One row per rank "<rank>  <host>  -  <dp>  <pp>  <tp>  <local rank>", printed once (rank 0).
rows=$(grep -cE '^\[loom r0 [^]]*\] +[0-3]  [^ ]+ +- +0 +[01] +[01] +[0-3]$' out.txt)
[ "$rows" -eq 4 ] || fail "expected 4 rank rows from rank 0, found $rows"
grep -E '^\[loom r0 [^]]*\] +3  ' out.txt | grep -qE ' +0 +1 +1 +3$' || fail "rank 3 is not dp0 pp1 tp1, local rank 3"
grep -q "tensor-parallel group" err.txt && fail "unexpected topology warning on one host"
echo "ok   rank map: $rows rows, host $host"
