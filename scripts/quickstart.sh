#!/usr/bin/env bash
# loom quickstart: installs what is missing, builds, fetches the GPT-2 tokenizer, prepares a real
# corpus (the King James Bible from Debian's bible-kjv package), trains a small GPT on the cpu
# backend over 8 MPI ranks as dp2 x pp2 x tp2 with ZeRO-1 and the 1F1B schedule (loss, eval and
# checkpoints as it goes), plots the metrics and prints a generated sample.
# Extra arguments are passed to `loom train`, e.g. --set train.steps=50.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
./scripts/get_gpt2_tokenizer.sh
./scripts/prepare_corpus.sh
rm -rf runs/quickstart checkpoints/quickstart  # a fresh demo every time
./scripts/launch.sh -n 8 configs/quickstart.yaml "$@"
/usr/bin/python3 scripts/plot_metrics.py runs/quickstart
echo
echo "quickstart: a sample from the trained model (loom generate, temperature 0.8, top-k 40):"
build/bin/loom generate --checkpoint checkpoints/quickstart --prompt "And God said" \
  --max-tokens 48 --temperature 0.8 --top-k 40 --seed 7
