#!/usr/bin/env bash
# Bad input to `loom`: every case must exit non-zero within the timeout, print the expected
# one-line message on stderr, and leave no run or checkpoint directory behind.
# usage: test_bad_input.sh LOOM_BINARY WORKDIR SOURCE_DIR
set -uo pipefail
loom="$1"; work="$2"; src="$3"
bin="$(dirname "$loom")"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
passed=0; failed=0
mpi4=(mpirun -np 4 --oversubscribe --allow-run-as-root)
mpi2=(mpirun -np 2 --oversubscribe --allow-run-as-root)

# expect NAME EXPECTED_TEXT COMMAND...: non-zero exit, the text on stderr, nothing written.
expect() {
  local name="$1" want="$2"; shift 2
  rm -rf runs checkpoints
  timeout 120 "$@" > out.txt 2> err.txt
  local rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
    echo "FAIL $name: exit $rc"; failed=$((failed + 1)); return
  fi
  if ! grep -qF -- "$want" err.txt; then
    echo "FAIL $name: stderr lacks '$want':"; head -5 err.txt; failed=$((failed + 1)); return
  fi
  if [ -e runs ] || [ -e checkpoints ]; then
    echo "FAIL $name: wrote output"; failed=$((failed + 1)); return
  fi
  echo "ok   $name: $(grep -F -- "$want" err.txt | head -1)"
  passed=$((passed + 1))
}

mkdir -p text && cp /usr/share/common-licenses/GPL-3 text/gpl.txt
"$bin/loom-preprocess" --input text --output-prefix good --tokenizer bytes --append-eod --workers 1 >/dev/null 2>&1
cat > ok.yaml <<'YAML'
run: {name: bad}
model: {n_layer: 2, n_head: 2, d_model: 32, vocab_size: 257, seq_len: 16}
parallel: {micro_batch_size: 2}
train: {global_batch_size: 4, steps: 2}
data: {train: [good]}
YAML

expect "missing config" "cannot read config file 'nowhere.yaml'" "$loom" train nowhere.yaml
printf 'model: {n_layers: 2}\n' > typo.yaml
expect "unknown key" "unknown key 'model.n_layers'; did you mean 'model.n_layer'?" "$loom" train typo.yaml
printf 'model: [1, 2\n' > syntax.yaml
expect "yaml syntax" "syntax.yaml:" "$loom" train syntax.yaml
expect "grid vs world" "= 8 ranks but the job has 4" "${mpi4[@]}" "$loom" train ok.yaml \
  --set parallel.tp=2 --set parallel.pp=2 --set parallel.dp=2
expect "heads vs tp" "parallel.tp" "${mpi4[@]}" "$loom" train ok.yaml --set parallel.tp=4 --set model.n_head=2
expect "layers vs pp" "parallel.pp: 4 is more than model.n_layer=2" "${mpi4[@]}" "$loom" train ok.yaml --set parallel.pp=4
expect "batch vs dp" "train.global_batch_size: 4 is not divisible" "${mpi4[@]}" "$loom" train ok.yaml \
  --set parallel.dp=4 --set parallel.micro_batch_size=2
expect "schedule" "parallel.schedule: '1f2b'" "$loom" train ok.yaml --set parallel.schedule=1f2b
expect "missing data" "missing.idx" "$loom" train ok.yaml --set data.train=missing
head -c 20 good.idx > trunc.idx && cp good.bin trunc.bin
expect "truncated idx" "trunc.idx" "$loom" train ok.yaml --set data.train=trunc
{ printf 'XXXXXXX\0\0'; tail -c +10 good.idx; } > magic.idx && cp good.bin magic.bin
expect "wrong magic" "magic.idx" "$loom" train ok.yaml --set data.train=magic
expect "missing init file" "init file 'nowhere.h5' does not exist" "$loom" train ok.yaml --set train.init_from=nowhere.h5
fx="$src/tests/reference/fixtures/gpt2_tiny_weights.h5"
expect "init: wrong shape" "has shape [97,32], the model needs [257,32]" "$loom" train ok.yaml --set train.init_from="$fx"
expect "init: missing tensor" "missing tensor 'h.2.ln_1.weight'" "$loom" train ok.yaml \
  --set train.init_from="$fx" --set model.vocab_size=97 --set model.n_layer=3 --set model.n_head=4 \
  --set model.max_positions=16 --set model.seq_len=8 --set tokenizer.type=gpt2 \
  --set tokenizer.vocab=unused --set tokenizer.merges=unused
expect "generate: missing checkpoint" "checkpoint 'nowhere' does not exist" "$loom" generate --checkpoint nowhere --prompt hi
expect "eval: no validation data" "has no validation data" "$loom" eval ok.yaml --checkpoint nowhere
expect "unknown command" "unknown command 'trian'" "$loom" trian ok.yaml
# device: cuda where it cannot run: a build without CUDA says so; a CUDA build on a machine
# without a GPU names the rank and host that see none (on 2 ranks: one message, both exit).
if [ -n "$(ls "$bin"/../tests/test_cuda_kernels 2>/dev/null)" ]; then
  if ! nvidia-smi -L >/dev/null 2>&1; then
    expect "cuda without a GPU" "sees no GPU" "${mpi2[@]}" "$loom" train ok.yaml --set device=cuda --set parallel.dp=2
    expect "cuda fp16 without a GPU" "sees no GPU" "$loom" train ok.yaml --set device=cuda --set train.dtype=fp16
  fi
else
  expect "cuda in a cpu-only build" "built without CUDA" "$loom" train ok.yaml --set device=cuda
fi
expect "cuda: head size" "head size) is not supported by the cuda attention" "$loom" train ok.yaml \
  --set device=cuda --set model.n_head=4
expect "cuda: bf16 with ZeRO-3" "zero_stage: 3 with train.dtype: bf16" "$loom" train ok.yaml \
  --set device=cuda --set train.dtype=bf16 --set optimizer.zero_stage=3

# A real checkpoint for the generate prompt-length case.
"$loom" train ok.yaml --set checkpoint.save_interval=2 --set checkpoint.dir=ck > /dev/null 2>&1
long=$(head -c 100 /usr/share/common-licenses/GPL-3)
rm -rf runs
timeout 60 "$loom" generate --checkpoint ck --prompt "$long" > out.txt 2> err.txt
if [ $? -ne 0 ] && grep -qF "the model's context (model.seq_len) is 16 tokens" err.txt; then
  echo "ok   generate: prompt too long"; passed=$((passed + 1))
else
  echo "FAIL generate: prompt too long"; cat err.txt; failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
