#!/usr/bin/env bash
# loom quickstart: installs what is missing, builds, fetches the GPT-2 tokenizer, prepares a real
# corpus (the King James Bible from Debian's bible-kjv package), and trains a small GPT on the
# cpu backend over 8 MPI ranks as dp2 x pp2 x tp2 with the 1F1B schedule, printing the loss.
# Extra arguments are passed to `loom train`, e.g. --set train.steps=50.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
./scripts/get_gpt2_tokenizer.sh
./scripts/prepare_corpus.sh
./scripts/launch.sh -n 8 configs/quickstart.yaml "$@"
echo "quickstart: metrics in runs/quickstart/metrics.jsonl"
