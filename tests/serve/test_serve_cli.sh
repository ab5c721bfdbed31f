#!/usr/bin/env bash
# loom serve end to end, with curl as the client: a checkpoint trained on one rank is served on
# tp2 x pp2 (4 ranks) and on one rank. Greedy completions equal loom generate's text; logprobs
# equal the 1-rank server's within the bound below; streaming gives the non-streaming text; 16
# concurrent clients are all answered, with the text each gets alone; bad requests get 400 with
# an OpenAI-style error while the server stays up; two data-parallel replicas share the
# requests; a client that hangs up mid-stream frees its slot; SIGTERM finishes the request in flight, refuses new ones and exits 0; a killed rank ends
# the server; bad command lines get one error each.
# The official OpenAI Node.js client (scripts/get_openai_client.sh puts it in CLIENT_DIR) asks the
# tp2 x pp2 server too: the models list, a greedy completion, its stream, and a 400 it raises as
# BadRequestError.
# A checkpoint whose tokenizer does not match its model gets 400 for prompt ids the model lacks.
# usage: test_serve_cli.sh LOOM_BINARY WORKDIR [CLIENT_DIR [GPT2_TOKENIZER_DIR]]
set -uo pipefail
py="${LOOM_PYTHON3:-python3}"  # the tests' interpreter (tests/CMakeLists.txt)
loom="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; work="$2"; client="${3:-}"; gpt2="${4:-}"
here="$(cd "$(dirname "$0")" && pwd)"
bin="$(dirname "$loom")"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
passed=0; failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }
mpi=(mpirun --oversubscribe --allow-run-as-root)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null; done; }
trap cleanup EXIT

mkdir -p text && cp /usr/share/common-licenses/GPL-3 text/gpl.txt
"$bin/loom-preprocess" --input text --output-prefix gpl --tokenizer bytes --append-eod \
  --workers 1 > /dev/null 2>&1 || { echo "FAIL loom-preprocess"; exit 1; }
cat > tiny.yaml <<'YAML'
run: {name: tiny-serve}
model: {n_layer: 2, n_head: 4, d_model: 48, vocab_size: 257, seq_len: 64}
parallel: {micro_batch_size: 8}
train: {global_batch_size: 16, steps: 400, log_interval: 100}
optimizer: {lr: 0.01, warmup_steps: 20}
data: {train: [gpl]}
checkpoint: {dir: ck, save_interval: 400}
YAML
"$loom" train tiny.yaml > train.log 2>&1 || { echo "FAIL training the checkpoint"; tail -5 train.log; exit 1; }

# serve NAME NP [loom serve args...]: starts a server in the background (on checkpoint
# $SERVE_CKPT, default ck); sets port and pid.
serve() {
  local name=$1 np=$2
  shift 2
  "${mpi[@]}" -np "$np" "$loom" serve --checkpoint "${SERVE_CKPT:-ck}" --port 0 "$@" > "$name.out" 2> "$name.err" &
  pid=$!
  pids+=("$pid")
  port=""
  for _ in $(seq 1 300); do
    port=$(grep -o "listening on http://127.0.0.1:[0-9]*" "$name.err" | grep -o "[0-9]*$")
    [ -n "$port" ] && return 0
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.2
  done
  echo "FAIL server $name did not start"; cat "$name.err"; exit 1
}
# post PORT JSON [curl args]: the body of a POST /v1/completions; the status in $status.
post() {
  local p=$1 body=$2
  shift 2
  status=$(curl -s -o resp.json -w '%{http_code}' "$@" "http://127.0.0.1:$p/v1/completions" \
    -H 'Content-Type: application/json' -d "$body")
  cat resp.json
}
js() { "$py" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

serve A 4 --set parallel.tp=2 --set parallel.pp=2
portA=$port
serve B 1
portB=$port

# 1. /health and /v1/models.
[ "$(curl -s "http://127.0.0.1:$portA/health" | js 'd["status"]')" = ok ] && ok "health" || fail "health"
id=$(curl -s "http://127.0.0.1:$portA/v1/models" | js 'd["data"][0]["id"]')
[ "$id" = tiny-serve ] && ok "/v1/models: the run's name ($id)" || fail "/v1/models gave '$id'"

# 2. Greedy completions on tp2 x pp2 equal loom generate's on one rank, one prompt at a time.
printf 'GNU GENERAL\nThe licenses\nfree software\nYou may\n' > prompts.txt
OMP_NUM_THREADS=1 "$loom" generate --checkpoint ck --prompts prompts.txt --max-tokens 24 \
  --temperature 0 --batch 1 > ref.jsonl 2> ref.err || { cat ref.err; fail "loom generate"; }
i=0
while IFS= read -r prompt; do
  i=$((i + 1))
  want=$(sed -n "${i}p" ref.jsonl | js 'd["text"]')
  body=$("$py" -c 'import json,sys; print(json.dumps({"model": "tiny-serve", "prompt": sys.argv[1], "max_tokens": 24, "temperature": 0}))' "$prompt")
  post "$portA" "$body" > "greedy_$i.json"
  got=$(js 'd["choices"][0]["text"]' < "greedy_$i.json")
  if [ "$status" = 200 ] && [ "$got" = "$want" ]; then ok "greedy '$prompt' = loom generate: '$got'"
  else fail "greedy '$prompt': status $status, '$got' != generate's '$want'"; fi
  # 3. Streaming gives the same text (and finish reason), then data: [DONE].
  sbody=$("$py" -c 'import json,sys; d=json.loads(sys.argv[1]); d["stream"]=True; print(json.dumps(d))' "$body")
  curl -s -N "http://127.0.0.1:$portA/v1/completions" -d "$sbody" > "stream_$i.txt"
  st=$("$py" - "stream_$i.txt" "greedy_$i.json" <<'PY'
import json, sys
events = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
whole = json.load(open(sys.argv[2]))["choices"][0]
assert events and events[-1] == "[DONE]", "no [DONE] at the end"
chunks = [json.loads(e)["choices"][0] for e in events[:-1]]
text = "".join(c["text"] for c in chunks)
assert text == whole["text"], f"streamed {text!r} != whole {whole['text']!r}"
assert chunks[-1]["finish_reason"] == whole["finish_reason"], "finish reasons differ"
assert all(c["finish_reason"] is None for c in chunks[:-1]), "finish_reason before the end"
print(len(chunks))
PY
  ) && ok "stream '$prompt': $st chunks, the same text" || fail "stream '$prompt': $st"
done < prompts.txt

# 4. A stop string (3 characters from the middle of a greedy text): the text ends before it,
# finish_reason stop, streamed alike, as loom generate --stop.
stop=$(js 'd["choices"][0]["text"][10:13]' < greedy_2.json)
body=$("$py" -c 'import json,sys; print(json.dumps({"prompt": "The licenses", "max_tokens": 24, "temperature": 0, "stop": [sys.argv[1]]}))' "$stop")
post "$portA" "$body" > stop.json
OMP_NUM_THREADS=1 "$loom" generate --checkpoint ck --prompt "The licenses" --max-tokens 24 \
  --temperature 0 --stop "$stop" > stop_ref.txt 2> /dev/null
got=$(js 'd["choices"][0]["text"]' < stop.json)
[ "The licenses$got" = "$(cat stop_ref.txt)" ] && [ "$(js 'd["choices"][0]["finish_reason"]' < stop.json)" = stop ] &&
  ok "stop '$stop': '$got', finish_reason stop, = loom generate --stop" || fail "stop '$stop': '$got' vs '$(cat stop_ref.txt)'"
sbody=$("$py" -c 'import json,sys; d=json.loads(sys.argv[1]); d["stream"]=True; print(json.dumps(d))' "$body")
curl -s -N "http://127.0.0.1:$portA/v1/completions" -d "$sbody" > stop_stream.txt
sgot=$("$py" -c '
import json, sys
ev = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ") and l != "data: [DONE]"]
print("".join(json.loads(e)["choices"][0]["text"] for e in ev))' stop_stream.txt)
[ "$sgot" = "$got" ] && ok "stop string streamed: the same text" || fail "stop streamed '$sgot' != '$got'"

# 5. Logprobs: tp2 x pp2 against one rank. The layouts' logits differ by the order of fp32 sums
# only: at most 1e-4 of the row's largest |logit| (the suite's bound; tests/generate checks the
# logits themselves on every layout); a logprob z_i - logsumexp(z) then moves by at most twice
# that. A generous 50 for the largest |logit| of this model (LayerNorm'd rows of norm about
# sqrt(48) times the gains, against tied embedding rows of norm about 1) gives 2 x 1e-4 x 50 =
# 1e-2; a logprob of the wrong row or position is off by far more.
body='{"prompt": ["GNU GENERAL", "The licenses"], "max_tokens": 20, "temperature": 0, "logprobs": 0}'
post "$portA" "$body" > lp_A.json
post "$portB" "$body" > lp_B.json
"$py" - lp_A.json lp_B.json <<'PY' && ok "logprobs: tp2 x pp2 = one rank within 1e-2" || fail "logprobs differ"
import json, sys
a, b = (json.load(open(f))["choices"] for f in sys.argv[1:3])
worst = 0.0
for ca, cb in zip(a, b):
    la, lb = ca["logprobs"], cb["logprobs"]
    assert la["tokens"] == lb["tokens"] and ca["text"] == cb["text"], "tokens differ"
    assert len(la["token_logprobs"]) == len(la["tokens"]) == len(la["text_offset"]) > 0
    assert all(x <= 0 for x in la["token_logprobs"]), "a logprob above 0"
    assert "".join(la["tokens"]) == ca["text"], "tokens do not spell the text"
    worst = max([worst] + [abs(x - y) for x, y in zip(la["token_logprobs"], lb["token_logprobs"])])
print(f"largest difference {worst:.2e}")
sys.exit(0 if worst <= 1e-2 else 1)
PY

# 5a. The official OpenAI client against the same server.
if [ -n "$client" ] && [ -f "$client/index.js" ] && command -v node > /dev/null; then
  want=$(sed -n "2p" ref.jsonl | js 'd["text"]')
  if node "$(dirname "$0")/openai_client.js" "$client" "http://127.0.0.1:$portA/v1" tiny-serve > oai.jsonl 2> oai.err; then
    "$py" - oai.jsonl "$want" <<'PY' && ok "openai npm client: models, greedy '$want', stream, BadRequestError" || fail "openai npm client: $(cat oai.jsonl)"
import json, sys
r = {j["check"]: j for j in map(json.loads, open(sys.argv[1]))}
assert r["models"]["ids"] == ["tiny-serve"], r["models"]
assert r["whole"]["text"] == sys.argv[2] and r["whole"]["finish"] == "length", r["whole"]
assert len(r["whole"]["logprobs"]) == 24 and r["whole"]["usage"]["completion_tokens"] == 24
assert r["stream"]["text"] == sys.argv[2] and r["stream"]["finish"] == "length", r["stream"]
bad = r["bad"]
assert bad["status"] == 400 and bad["isBadRequest"] and bad["param"] == "max_tokens", bad
PY
  else
    fail "openai npm client: $(tail -3 oai.err)"
  fi
else
  echo "note: the OpenAI npm client is not in '$client' (scripts/get_openai_client.sh) or node is missing: its check is left out"
fi

# 5b. Sampling with a seed: the same request gives the same text twice and on both layouts (a
# draw is a function of the seed, the prompt's index in its request and the position).
body='{"prompt": ["You may", "free software"], "max_tokens": 16, "temperature": 0.9, "top_k": 40, "top_p": 0.95, "seed": 7}'
post "$portA" "$body" | js '[c["text"] for c in d["choices"]]' > seed_1.txt
post "$portA" "$body" | js '[c["text"] for c in d["choices"]]' > seed_2.txt
post "$portB" "$body" | js '[c["text"] for c in d["choices"]]' > seed_B.txt
cmp -s seed_1.txt seed_2.txt && cmp -s seed_1.txt seed_B.txt &&
  ok "seed 7: the same sampled text twice and on one rank: $(cat seed_1.txt)" ||
  fail "seeded sampling: $(cat seed_1.txt seed_2.txt seed_B.txt)"

# 6. 16 concurrent clients: all answered, each with the text it gets alone.
curls=()
for k in $(seq 1 16); do
  curl -s "http://127.0.0.1:$portA/v1/completions" -d "{\"prompt\": \"clause $k of\", \"max_tokens\": 12, \"temperature\": 0, \"logprobs\": 0}" > "many_$k.json" &
  curls+=($!)
done
wait_many=0
for c in "${curls[@]}"; do wait "$c" || wait_many=$((wait_many + 1)); done
# Batched rows round differently from a row alone (other GEMM shapes), so a greedy pick may
# flip where the two best logits tie within rounding: a text may differ from its alone run only
# from a token where both runs' chosen logprobs (each its run's maximum) are within the 1e-2
# bound of section 5, that is a tie.
answered=0 same=0 ties=0
for k in $(seq 1 16); do
  js 'd["choices"][0]["text"]' < "many_$k.json" > /dev/null 2>&1 || continue
  answered=$((answered + 1))
  post "$portA" "{\"prompt\": \"clause $k of\", \"max_tokens\": 12, \"temperature\": 0, \"logprobs\": 0}" > alone.json
  verdict=$("$py" - "many_$k.json" alone.json <<'PY'
import json, sys
a, b = (json.load(open(f))["choices"][0] for f in sys.argv[1:3])
if a["text"] == b["text"]:
    print("same")
else:
    ta, tb = a["logprobs"]["tokens"], b["logprobs"]["tokens"]
    j = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
    la, lb = a["logprobs"]["token_logprobs"], b["logprobs"]["token_logprobs"]
    tie = j < len(la) and j < len(lb) and abs(la[j] - lb[j]) <= 1e-2
    print(f"tie at token {j}" if tie else f"differs at token {j}: {a['text']!r} vs {b['text']!r}")
PY
  )
  case "$verdict" in
    same) same=$((same + 1)) ;;
    tie*) ties=$((ties + 1)); echo "note: clause $k: $verdict" ;;
    *) echo "clause $k: $verdict" ;;
  esac
done
[ "$answered" = 16 ] && [ $((same + ties)) = 16 ] &&
  ok "16 concurrent clients answered, each as alone ($ties diverging at a rounding tie)" ||
  fail "16 concurrent clients: $answered answered, $same as alone, $ties at ties, $wait_many curl failures"

# 6b. Two data-parallel replicas (dp2, 2 slots each): the four prompts at once, spread over
# both, each with loom generate's text.
serve E 2 --set parallel.dp=2 --batch 2
portE=$port
i=0 curls=()
while IFS= read -r prompt; do
  i=$((i + 1))
  body=$("$py" -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 24, "temperature": 0}))' "$prompt")
  curl -s "http://127.0.0.1:$portE/v1/completions" -d "$body" > "dp_$i.json" &
  curls+=($!)
done < prompts.txt
wait "${curls[@]}"
same=0
for i in 1 2 3 4; do
  [ "$(js 'd["choices"][0]["text"]' < "dp_$i.json" 2> /dev/null)" = "$(sed -n "${i}p" ref.jsonl | js 'd["text"]')" ] && same=$((same + 1))
done
[ "$same" = 4 ] && ok "dp2: 4 concurrent prompts over 2 replicas, each = loom generate" ||
  fail "dp2: $same of 4 equal loom generate"

# 7. Bad requests: 400 (404 for another model or path) with an OpenAI-style error; still up.
bad() {
  local name=$1 want=$2 body=$3
  post "$portA" "$body" > bad.json
  type=$(js 'd["error"]["type"]' < bad.json 2> /dev/null)
  msg=$(js 'd["error"]["message"]' < bad.json 2> /dev/null)
  if [ "$status" = "$want" ] && [ -n "$type" ] && [ -n "$msg" ]; then ok "bad request, $name: $status $type: $msg"
  else fail "bad request, $name: status $status, $(cat bad.json)"; fi
}
bad "invalid JSON" 400 '{"prompt": "a",'
bad "prompt of a wrong type" 400 '{"prompt": 17}'
bad "max_tokens 0" 400 '{"prompt": "a", "max_tokens": 0}'
bad "max_tokens a string" 400 '{"prompt": "a", "max_tokens": "3"}'
bad "longer than the context" 400 '{"prompt": "GNU GENERAL", "max_tokens": 60}'
bad "top-5 logprobs" 400 '{"prompt": "a", "logprobs": 5}'
bad "unknown argument" 400 '{"prompt": "a", "temprature": 0}'
bad "another model" 404 '{"prompt": "a", "model": "gpt-4"}'
code=$(curl -s -o nf.json -w '%{http_code}' "http://127.0.0.1:$portA/v1/chat/completions" -d '{}')
[ "$code" = 404 ] && grep -q '"error"' nf.json && ok "unknown path: 404 with an error" || fail "unknown path: $code"
post "$portA" '{"prompt": "GNU", "max_tokens": 3, "temperature": 0}' > /dev/null
[ "$status" = 200 ] && ok "still serving after the bad requests" || fail "after bad requests: $status"

# 7b. A checkpoint whose stored tokenizer (GPT-2's, 50257 ids) does not match its model (257 ids):
# a prompt with ids the model lacks gets 400, and the server stays up.
if [ -f "$gpt2/encoder.json" ]; then
  cp -r ck ck_swapped && "$py" "$here/../support/swap_tokenizer.py" ck_swapped "$gpt2"
  SERVE_CKPT=ck_swapped serve S 1
  post "$port" '{"prompt": "GNU license", "max_tokens": 2}' > swapped.json
  swapped_status=$status
  post "$port" '{"prompt": "a", "max_tokens": 2}' > /dev/null  # GPT-2's id of "a" is 64
  if [ "$swapped_status" = 400 ] && grep -q "257-entry vocabulary (model.vocab_size) lacks" swapped.json &&
    [ "$status" = 200 ]; then
    ok "tokenizer larger than the model: 400 ($(js 'd["error"]["message"]' < swapped.json)), still up"
  else
    fail "tokenizer larger than the model: $swapped_status $(cat swapped.json), then $status"
  fi
  kill -TERM "$pid"
else
  echo "skip tokenizer larger than the model: no GPT-2 tokenizer in '$gpt2' (scripts/get_gpt2_tokenizer.sh)"
fi

# 8. A client that hangs up mid-stream frees its slot: one slot, slowed decode steps.
export LOOM_TEST_DECODE_SLEEP_MS=100
serve C 2 --set parallel.tp=2 --batch 1
portC=$port pidC=$pid
unset LOOM_TEST_DECODE_SLEEP_MS
curl -s -N "http://127.0.0.1:$portC/v1/completions" \
  -d '{"prompt": "GNU", "max_tokens": 50, "temperature": 0, "stream": true}' > hangup.txt &
hp=$!
for _ in $(seq 1 100); do grep -q '^data: {' hangup.txt 2> /dev/null && break; sleep 0.1; done
kill "$hp"  # hang up after the first piece, 49 tokens (5 s) before the end
wait "$hp" 2> /dev/null
post "$portC" '{"prompt": "The", "max_tokens": 3, "temperature": 0}' > after_hangup.json
[ "$status" = 200 ] && ok "after a client hung up mid-stream the single slot serves the next" ||
  fail "after hang-up: $status"

# 9. SIGTERM to rank 0 while a request streams: it finishes, a new request is refused, exit 0.
curl -s -N "http://127.0.0.1:$portC/v1/completions" \
  -d '{"prompt": "GNU", "max_tokens": 30, "temperature": 0, "stream": true}' > term_stream.txt &
cpid=$!
for _ in $(seq 1 100); do grep -q '^data: {' term_stream.txt 2> /dev/null && break; sleep 0.1; done
rank0=""
for p in $(pgrep -P "$pidC"); do
  tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=0' && rank0=$p
done
kill -TERM "$rank0"
sleep 0.3
code=$(curl -s -o refused.json -w '%{http_code}' "http://127.0.0.1:$portC/v1/completions" -d '{"prompt": "a"}')
wait "$cpid"
timeout 60 tail --pid="$pidC" -f /dev/null
wait "$pidC"; rc=$?
"$py" - term_stream.txt <<'PY' && s_ok=1 || s_ok=0
import json, sys
ev = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert ev[-1] == "[DONE]"
assert json.loads(ev[-2])["choices"][0]["finish_reason"] in ("length", "stop")
PY
if [ "$s_ok" = 1 ] && [ "$code" = 503 ] && [ "$rc" = 0 ] &&
  grep -q "1 cancelled by their clients" C.err; then
  ok "SIGTERM: the stream in flight finished, a new request got 503, exit 0; the hang-up was 1 cancel"
else
  fail "SIGTERM: stream ok $s_ok, new request $code, exit $rc: $(tail -2 C.err)"
fi

# 10. A rank that dies ends the server (mpirun aborts the job), never a hang.
serve D 2 --set parallel.tp=2
pidD=$pid
victim=""
for p in $(pgrep -P "$pidD"); do
  tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$p
done
kill -9 "$victim"
timeout 60 tail --pid="$pidD" -f /dev/null
if kill -0 "$pidD" 2> /dev/null; then fail "a killed rank left the server running"; else
  wait "$pidD"; rc=$?
  [ "$rc" != 0 ] && ok "a killed rank ended the server (exit $rc)" || fail "killed rank: exit 0"
fi

# 11. Bad command lines: one error each, before serving.
expect() {
  local name=$1 want=$2
  shift 2
  timeout 120 "$@" > cli.out 2> cli.err
  local rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF -- "$want" cli.err; then ok "$name: $(grep -F -- "$want" cli.err | head -1)"
  else fail "$name: exit $rc, $(head -3 cli.err)"; fi
}
expect "layout that does not fit" "tp x pp" "${mpi[@]}" -np 3 "$loom" serve --checkpoint ck --port 0 --set parallel.tp=2
expect "port out of range" "--port 70000 must be in 0..65535" "$loom" serve --checkpoint ck --port 70000
expect "no checkpoint" "loom serve needs --checkpoint DIR" "$loom" serve
expect "not a layout key" "--set optimizer.lr is not a layout key" "$loom" serve --checkpoint ck --set optimizer.lr=1
expect "port in use" "cannot listen on 127.0.0.1:$portA" "$loom" serve --checkpoint ck --port "$portA"

echo "passed $passed, failed $failed"
[ "$failed" = 0 ]
