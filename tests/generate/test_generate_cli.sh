#!/usr/bin/env bash
# loom generate end to end: a checkpoint trained on one rank generates the same text on every
# layout (greedy: tp2, pp2, dp2 on 2 ranks, tp2 x pp2 on 4; sampled: dp2, tp2 x pp2), for gpt2
# and llama (GQA); stop strings and JSON lines; and bad input gets one clear error each.
# usage: test_generate_cli.sh LOOM_BINARY WORKDIR [GPT2_TOKENIZER_DIR]
set -uo pipefail
py="${LOOM_PYTHON3:-python3}"  # the tests' interpreter (tests/CMakeLists.txt)
loom="$1"; work="$2"; gpt2="${3:-}"
here="$(cd "$(dirname "$0")" && pwd)"
bin="$(dirname "$loom")"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
passed=0; failed=0
mpi2=(mpirun -np 2 --oversubscribe --allow-run-as-root)
mpi4=(mpirun -np 4 --oversubscribe --allow-run-as-root)
ok() { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }

# expect NAME EXPECTED_TEXT COMMAND...: non-zero exit within the timeout, the text on stderr.
expect() {
  local name="$1" want="$2"; shift 2
  timeout 120 "$@" > out.txt 2> err.txt
  local rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then fail "$name: exit $rc"; return; fi
  if ! grep -qF -- "$want" err.txt; then fail "$name: stderr lacks '$want'"; head -5 err.txt; return; fi
  ok "$name: $(grep -F -- "$want" err.txt | head -1)"
}

mkdir -p text && cp /usr/share/common-licenses/GPL-3 text/gpl.txt
"$bin/loom-preprocess" --input text --output-prefix gpl --tokenizer bytes --append-eod \
  --workers 1 >/dev/null 2>&1
cat > tiny.yaml <<'YAML'
run: {name: gen}
model: {n_layer: 2, n_head: 4, d_model: 32, vocab_size: 257, seq_len: 32}
parallel: {micro_batch_size: 4}
train: {global_batch_size: 8, steps: 10, log_interval: 10}
optimizer: {lr: 0.01, warmup_steps: 5}
data: {train: [gpl]}
checkpoint: {save_interval: 10}
YAML
printf 'GNU GENERAL\nThe licenses\n\nfree software\n' > prompts.txt

for arch in gpt2 llama; do
  extra=()
  [ $arch = llama ] && extra=(--set model.arch=llama --set model.n_kv_head=2 --set model.ffn_hidden=64)
  if ! "$loom" train tiny.yaml "${extra[@]}" --set checkpoint.dir=ck_$arch > train_$arch.log 2>&1; then
    fail "$arch: training the test checkpoint"; tail -5 train_$arch.log; continue
  fi
  # Greedy, and sampled (the draws are a function of seed, sequence and position).
  for mode in greedy sampled; do
    gen=("$loom" generate --checkpoint ck_$arch --prompts prompts.txt --max-tokens 12)
    if [ $mode = greedy ]; then gen+=(--temperature 0); else gen+=(--temperature 0.8 --top-k 40 --seed 5); fi
    OMP_NUM_THREADS=1 "${gen[@]}" > single.txt 2> single.err
    if [ "$(wc -l < single.txt)" -eq 4 ] && [ "$(grep -c '"finish":"\(length\|stop_token\)"' single.txt)" -eq 4 ]; then
      ok "$arch $mode: 4 prompts on one rank"
    else
      fail "$arch $mode: one rank"; cat single.txt single.err
    fi
    layouts=("2 tp=2" "2 pp=2" "2 dp=2" "4 tp=2 pp=2")
    [ $mode = sampled ] && layouts=("2 dp=2" "4 tp=2 pp=2")  # all four: test_generate_layouts_mpi
    for layout in "${layouts[@]}"; do
      set -- $layout; n=$1; shift
      sets=(); for kv in "$@"; do sets+=(--set parallel.$kv); done
      if [ $n = 2 ]; then mpi=("${mpi2[@]}"); else mpi=("${mpi4[@]}"); fi
      OMP_NUM_THREADS=1 timeout 120 "${mpi[@]}" "${gen[@]}" "${sets[@]}" > lay.txt 2> lay.err
      rc=$?
      if [ $rc -eq 0 ] && [ -s lay.txt ] && cmp -s lay.txt single.txt; then
        ok "$arch $mode: $* same text as one rank"
      else
        fail "$arch $mode: $* differs from one rank (exit $rc)"; diff lay.txt single.txt | head; tail -3 lay.err
      fi
    done
  done
done

# Stop strings: the text is the run without them cut before the first occurrence, finish
# "stop"; JSON lines carry their own max_tokens and stop.
printf '{"prompt": "GNU GENERAL", "max_tokens": 16}\n' > free.jsonl
samp=(--temperature 0.8 --top-k 40 --seed 5)
"$loom" generate --checkpoint ck_gpt2 --prompts free.jsonl "${samp[@]}" > free.txt 2> free.err
stop=$($py -c '
import json, re, sys
t = json.loads(open("free.txt").readline())["text"]
m = re.search(r"[A-Za-z ]{2}", t[2:])
print(m.group(0) if m else "", end="")')
if [ -z "$stop" ]; then
  fail "stop strings: no two letters in the free text to stop at"; cat free.txt
else
  $py -c 'import json, sys; print(json.dumps({"prompt": "GNU GENERAL", "max_tokens": 16, "stop": [sys.argv[1]]}))' \
    "$stop" > stop.jsonl
  "$loom" generate --checkpoint ck_gpt2 --prompts stop.jsonl "${samp[@]}" > stop.txt 2> stop.err
  if $py -c '
import json, sys
free = json.loads(open("free.txt").readline())["text"]
got = json.loads(open("stop.txt").readline())
want = free[:free.index(sys.argv[1])]
sys.exit(0 if got["text"] == want and got["finish"] == "stop" else 1)' "$stop"; then
    ok "stop string '$stop': the text ends before it"
  else
    fail "stop strings"; cat free.txt stop.txt stop.err
  fi
fi

# Bad input: one clear error each, before any work.
expect "missing checkpoint" "checkpoint 'nowhere' does not exist" \
  "$loom" generate --checkpoint nowhere --prompt hi
expect "missing prompts file" "--prompts missing.txt: cannot open" \
  "$loom" generate --checkpoint ck_gpt2 --prompts missing.txt
printf '{"prompt": "a"}\n{"text": "b"}\n' > bad.jsonl
expect "prompts: line without prompt" "bad.jsonl line 2: no string \"prompt\"" \
  "$loom" generate --checkpoint ck_gpt2 --prompts bad.jsonl
printf '{"prompt": "a"\n' > broken.jsonl
expect "prompts: broken JSON" "broken.jsonl line 1: not valid JSON" \
  "$loom" generate --checkpoint ck_gpt2 --prompts broken.jsonl
: > empty.txt
expect "prompts: empty file" "holds no prompts" "$loom" generate --checkpoint ck_gpt2 --prompts empty.txt
expect "prompt + max tokens > seq_len" "the model's context (model.seq_len) is 32 tokens" \
  "$loom" generate --checkpoint ck_gpt2 --prompt "GNU GENERAL PUBLIC" --max-tokens 20
expect "temperature" "--temperature: expected a number >= 0, got '-1'" \
  "$loom" generate --checkpoint ck_gpt2 --prompt a --temperature -1
expect "temperature not finite" "--temperature inf must be a finite number" \
  "$loom" generate --checkpoint ck_gpt2 --prompt a --temperature inf
expect "top-p" "top-p 1.5 must be in (0, 1]" "$loom" generate --checkpoint ck_gpt2 --prompt a --top-p 1.5
expect "top-k" "--top-k: expected a non-negative integer, got '-3'" \
  "$loom" generate --checkpoint ck_gpt2 --prompt a --top-k -3
expect "max tokens" "--max-tokens 0 must be >= 1" \
  "$loom" generate --checkpoint ck_gpt2 --prompt a --max-tokens 0
expect "both prompt kinds" "one of --prompt TEXT or --prompts FILE" \
  "$loom" generate --checkpoint ck_gpt2 --prompt a --prompts prompts.txt
expect "context parallelism refused" "parallel.cp=2 is refused" \
  "${mpi2[@]}" "$loom" generate --checkpoint ck_gpt2 --prompt a --set parallel.cp=2
expect "model keys refused" "--set model.n_layer is not a layout key" \
  "$loom" generate --checkpoint ck_gpt2 --prompt a --set model.n_layer=4
expect "layout vs world" "does not divide the job's 2 ranks" \
  "${mpi2[@]}" "$loom" generate --checkpoint ck_gpt2 --prompt a --set parallel.tp=2 --set parallel.pp=2
# A checkpoint whose stored tokenizer (GPT-2's, 50257 ids) does not match its model (257 ids):
# prompt ids the model lacks are refused before any decoding.
if [ -f "$gpt2/encoder.json" ]; then
  cp -r ck_gpt2 ck_swapped && "$py" "$here/../support/swap_tokenizer.py" ck_swapped "$gpt2"
  expect "tokenizer larger than the model" "which the model's 257-entry vocabulary (model.vocab_size) lacks" \
    "$loom" generate --checkpoint ck_swapped --prompt "GNU license"
else
  echo "skip tokenizer larger than the model: no GPT-2 tokenizer in '$gpt2' (scripts/get_gpt2_tokenizer.sh)"
fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
