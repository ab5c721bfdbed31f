#!/usr/bin/env bash
# bench_generate.sh: loom generate's speed on cpu: prefill and decode tokens/s for batch 1, 8 and
# 32, with and without the KV cache, and decode as a fraction of the memory-bandwidth bound.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'USAGE'
usage: scripts/bench_generate.sh [--build DIR] [--batches "1 8 32"] [--tokens N] [--threads T]
Trains a GPT-2 shaped model (6 layers, 8 heads, d_model 512, byte vocabulary, seq_len 128;
19M parameters) for one step to get a checkpoint, then runs `loom generate` greedily on B
prompts of 32 bytes for N new tokens (default 32), with the KV cache and with --no-cache (every
token recomputes each prefix), on one rank with T OpenMP threads (default: all cores).
Prints prefill and decode tokens/s (loom generate's own timers) and, for decode with the cache,
the fraction of the memory-bandwidth bound: a decode step of B sequences must read every weight
once and each sequence's cached keys and values (4 bytes each), at the read bandwidth measured
by a stream-like probe (sum over a 512 MiB array on all threads, best of 5).
  --build DIR   loom build folder (default build, built with scripts/build.sh when missing)
USAGE
}

BUILD=build BATCHES="1 8 32" NEW=32 THREADS=$(nproc)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --batches) BATCHES="$2"; shift 2 ;;
    --tokens) NEW="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_generate.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
if [ ! -x "$BUILD/bin/loom" ]; then
  [ "$BUILD" = build ] || { echo "bench_generate.sh: no $BUILD/bin/loom; build it first" >&2; exit 1; }
  scripts/build.sh >/dev/null
fi
LOOM="$(realpath "$BUILD/bin/loom")"
work="$(realpath "$BUILD")/bench_generate"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
export OMP_NUM_THREADS=$THREADS OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Read bandwidth: every thread sums its part of a float array; bytes read / best time.
cat > probe.cpp <<'CPP'
#include <chrono>
#include <cstdio>
#include <vector>
int main() {
  const size_t n = size_t(1) << 27;  // 512 MiB of floats
  std::vector<float> a(n, 1.0f);
  double best = 1e30, total = 0;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (long i = 0; i < long(n); ++i) s += a[size_t(i)];
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = dt < best ? dt : best;
    total += s;
  }
  std::printf("%.3f %g\n", double(n) * sizeof(float) / best / 1e9, total);
}
CPP
g++ -O3 -ffast-math -march=native -fopenmp probe.cpp -o probe  # fast-math: a vectorized sum
BW=$(./probe | cut -d' ' -f1)

mkdir -p text && cp /usr/share/common-licenses/GPL-3 text/gpl.txt
"$(dirname "$LOOM")/loom-preprocess" --input text --output-prefix gpl --tokenizer bytes \
  --append-eod --workers 1 >/dev/null
L=6 C=512 T=128
cat > model.yaml <<YAML
run: {name: bench_generate}
model: {n_layer: $L, n_head: 8, d_model: $C, vocab_size: 257, seq_len: $T}
train: {global_batch_size: 1, steps: 1}
data: {train: [gpl]}
checkpoint: {dir: ck, save_interval: 1}
YAML
"$LOOM" train model.yaml > train.log 2>&1
# Prompts: 32-byte pieces of the license text, one per line.
tr -d '\n"\\' < text/gpl.txt | fold -w 32 | head -32 > all_prompts.txt

# params: wte (257 x C) + wpe (T x C) + per layer 12 C^2 + 13 C + final norm 2 C (tied head).
P=$(( 257 * C + T * C + L * (12 * C * C + 13 * C) + 2 * C ))
calc() { awk "BEGIN { printf \"%.${1}f\", $2 }"; }
printf "machine: %s, %s threads, load average %s; read bandwidth %s GB/s; model %d parameters (%s MB fp32)\n" \
  "$(lscpu | sed -n 's/^Model name: *//p')" "$THREADS" "$(cut -d' ' -f1 /proc/loadavg)" "$BW" "$P" \
  "$(calc 1 "$P * 4 / 1e6")"
printf "%-6s %-9s %14s %14s %18s\n" batch kv-cache "prefill tok/s" "decode tok/s" "decode/bound"
for B in $BATCHES; do
  head -"$B" all_prompts.txt > p.txt
  for cache in on off; do
    flag=(); [ $cache = off ] && flag=(--no-cache)
    "$LOOM" generate --checkpoint ck --prompts p.txt --temperature 0 --max-tokens "$NEW" \
      --batch "$B" "${flag[@]}" > out.txt 2> err.txt
    line=$(grep "prefill" err.txt)
    pre=$(echo "$line" | sed -E 's/.*prefill [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')
    dec=$(echo "$line" | sed -E 's/.*decode [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')
    frac="-"
    if [ $cache = on ]; then
      # Bytes read per decode step: weights + each sequence's K|V over its mean context (32
      # prompt bytes + half the new tokens), 2 C floats per layer and position.
      ctx=$(( 32 + NEW / 2 ))
      bytes=$(( 4 * P + B * ctx * L * 2 * C * 4 ))
      bound=$(calc 3 "$B * $BW * 1e9 / $bytes")
      frac="$(calc 2 "$dec / $bound") (bound $(calc 0 "$bound"))"
    fi
    printf "%-6s %-9s %14s %14s %18s\n" "$B" "$cache" "$pre" "$dec" "$frac"
  done
done
