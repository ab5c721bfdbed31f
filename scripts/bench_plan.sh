#!/usr/bin/env bash
# The speed of loom plan's search: GPT-3 175B (96 layers, d_model 12288, 2048 tokens, global
# batch 1536, bf16) planned on 128 nodes of 8 H100s. Prints the plan's head and the wall and
# processor seconds the search took (GNU time).
# usage: scripts/bench_plan.sh [BUILD_DIR]   (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build}/bin/loom"
[[ -x $bin ]] || { echo "bench_plan: no $bin; build first (scripts/build.sh)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/gpt3_175b.yaml" <<'YAML'
run: {name: gpt3_175b}
model: {n_layer: 96, n_head: 96, d_model: 12288, vocab_size: 50257, seq_len: 2048}
train: {global_batch_size: 1536, dtype: bf16}
device: cuda
data: {train: [unused]}
YAML
TIMEFORMAT='bench_plan: %R s wall, %U s user'
time "$bin" plan "$work/gpt3_175b.yaml" --cluster configs/clusters/h100_80g_8x_128n.yaml | head -15
