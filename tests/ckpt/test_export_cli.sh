#!/usr/bin/env bash
# `loom export` with a lowered chunk size (LOOM_GATHER_CHUNK_BYTES): the safetensors file is
# bitwise the default export's, the HDF5 file holds the same datasets and values; a bad chunk
# size is one clear error and leaves no file.
# usage: test_export_cli.sh LOOM_BINARY WORKDIR (Python: $LOOM_PYTHON3, tests/CMakeLists.txt)
set -uo pipefail
loom="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; work="$2"; py="${LOOM_PYTHON3:-python3}"
bin="$(dirname "$loom")"
rm -rf "$work"; mkdir -p "$work/text"; cd "$work"
fail() { echo "FAIL: $1"; [ -f err.txt ] && tail -20 err.txt; exit 1; }
cp /usr/share/common-licenses/GPL-3 text/gpl.txt
"$bin/loom-preprocess" --input text --output-prefix corpus --tokenizer bytes --append-eod \
  --workers 1 >/dev/null 2>&1 || fail "loom-preprocess"
cat > e.yaml <<'YAML'
run: {name: e, dir: run}
model: {n_layer: 2, n_head: 2, d_model: 32, vocab_size: 257, seq_len: 16}
parallel: {micro_batch_size: 2}
train: {global_batch_size: 4, steps: 2}
data: {train: [corpus]}
checkpoint: {dir: ckpt, save_interval: 2}
YAML
timeout 300 "$loom" train e.yaml > out.txt 2> err.txt || fail "train exit $?"
mkdir -p def small
timeout 120 "$loom" export ckpt def/model.safetensors > out.txt 2> err.txt || fail "export"
timeout 120 "$loom" export ckpt def/model.h5 > out.txt 2> err.txt || fail "export h5"
# 100 bytes = 25 values: pieces of each 32-column row (and of the 128-column ones).
LOOM_GATHER_CHUNK_BYTES=100 timeout 120 "$loom" export ckpt small/model.safetensors > out.txt \
  2> err.txt || fail "chunked export"
LOOM_GATHER_CHUNK_BYTES=100 timeout 120 "$loom" export ckpt small/model.h5 > out.txt \
  2> err.txt || fail "chunked export h5"
cmp def/model.safetensors small/model.safetensors || fail "chunked safetensors differs"
cmp def/config.json small/config.json || fail "config.json differs"
"$py" - def/model.h5 small/model.h5 <<'PY' || fail "chunked HDF5 differs"
import sys
import h5py
import numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert sorted(a.keys()) == sorted(b.keys()) and len(a.keys()) > 10, (list(a), list(b))
for k in a:
    x, y = a[k][()], b[k][()]
    assert x.dtype == y.dtype == np.float32 and x.shape == y.shape, k
    assert x.tobytes() == y.tobytes(), k
print(f"ok   {len(a.keys())} HDF5 datasets bitwise equal")
PY
LOOM_GATHER_CHUNK_BYTES=12k timeout 60 "$loom" export ckpt bad.safetensors > out.txt 2> err.txt \
  && fail "a chunk size of 12k was accepted"
grep -q "LOOM_GATHER_CHUNK_BYTES='12k': give a byte count from 4 to" err.txt || fail "no clear error"
ls bad.safetensors* >/dev/null 2>&1 && fail "a file was left behind"
echo "ok   loom export with 100-byte chunks equals the default export"

# Memory: loom export reads the checkpoint one layer at a time, so exporting a model of 16 layers
# of d_model 512 (50.6M parameters, 202 MB in fp32) raises the process's peak RSS over the tiny
# model's export by at most about one layer (3.1M parameters, 12.6 MB), one chunk (at most the
# largest tensor, 4.2 MB) and the writer's buffers. Reading the whole model adds its 202 MB less
# what the allocator reuses of memory the baseline already holds (measured: 35 MB of a 99 MB
# model). The bound, half the model, lies between the two with room on either side.
if [ -n "${ASAN_OPTIONS:-}" ]; then  # AddressSanitizer's quarantine keeps freed memory resident
  echo "ok   export memory not measured under AddressSanitizer"
  exit 0
fi
cat > big.yaml <<'YAML'
run: {name: big, dir: bigrun}
model: {n_layer: 16, n_head: 8, d_model: 512, vocab_size: 257, seq_len: 16}
parallel: {micro_batch_size: 1}
train: {global_batch_size: 1, steps: 1}
data: {train: [corpus]}
checkpoint: {dir: bigckpt, save_interval: 1}
YAML
timeout 300 "$loom" train big.yaml > out.txt 2> err.txt || fail "train big exit $?"
"$py" - "$loom" <<'PY' || fail "export memory"
import resource, subprocess, sys
def peak_kib(args):  # the child's own peak RSS: each export runs in a fresh python child
    code = ("import resource,subprocess,sys;subprocess.run(sys.argv[1:],check=True,"
            "stdout=subprocess.DEVNULL);print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    return int(subprocess.run([sys.executable, "-c", code] + args, check=True,
                              capture_output=True, text=True).stdout)
loom = sys.argv[1]
tiny = peak_kib([loom, "export", "ckpt", "mem_tiny.safetensors"])
big = peak_kib([loom, "export", "bigckpt", "mem_big.safetensors"])
params = 257 * 512 + 16 * 512 + 16 * (12 * 512 * 512 + 13 * 512) + 2 * 512
model_kib = params * 4 // 1024
print(f"peak RSS: tiny export {tiny} KiB, big export {big} KiB; model {model_kib} KiB")
assert big - tiny < model_kib // 2, f"export held {big - tiny} KiB more than the tiny one"
PY
echo "ok   loom export of a 202 MB model stays within half of it above the tiny export's RSS"
