#!/usr/bin/env bash
# Prepares the quickstart corpus: the King James Bible from Debian's bible-kjv package, one
# document per chapter, tokenized with GPT-2 into data/corpus/kjv_train and kjv_valid (every
# 32nd chapter held out for validation, 37 of 1189). Idempotent: finished steps are skipped.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${LOOM_BUILD_DIR:-$ROOT/build}"
OUT="$ROOT/data/corpus"
say() { echo "prepare_corpus: $*"; }

# 1. The package (its `bible` command prints any range of verses).
if ! command -v bible >/dev/null 2>&1; then
  say "installing Debian package bible-kjv"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y -qq --no-install-recommends bible-kjv >/dev/null 2>&1 || {
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends bible-kjv >/dev/null; }
fi

# 2. Plain text: one verse per line, chapters separated by a blank line, references dropped.
#    `bible -f` prints "Ge1:1 In the beginning ..."; a new "book+chapter" starts a chapter.
mkdir -p "$OUT"
if [[ ! -s "$OUT/kjv_train.txt" || ! -s "$OUT/kjv_valid.txt" ]]; then
  bible -f "Genesis 1:1-Revelation 22:21" </dev/null | awk -v train="$OUT/kjv_train.txt.tmp" -v valid="$OUT/kjv_valid.txt.tmp" '
    { ref = $1; sub(/:[0-9]+$/, "", ref); $1 = ""; sub(/^ /, "")
      if (ref != last) { if (NR > 1) { print "" > f }; chapter++; f = (chapter % 32 == 0) ? valid : train }
      last = ref; print > f }'
  [[ -s "$OUT/kjv_train.txt.tmp" && -s "$OUT/kjv_valid.txt.tmp" ]] || {
    say "the bible command printed nothing" >&2; rm -f "$OUT"/kjv_*.txt.tmp; exit 1; }
  mv -f "$OUT/kjv_train.txt.tmp" "$OUT/kjv_train.txt"
  mv -f "$OUT/kjv_valid.txt.tmp" "$OUT/kjv_valid.txt"
  say "wrote $OUT/kjv_train.txt ($(wc -c <"$OUT/kjv_train.txt") bytes) and kjv_valid.txt ($(wc -c <"$OUT/kjv_valid.txt") bytes)"
else
  say "text already in place: $OUT/kjv_{train,valid}.txt"
fi

# 3. Tokenizer files, then the tokenized datasets (EOD after every chapter).
"$ROOT/scripts/get_gpt2_tokenizer.sh"
for part in train valid; do
  prefix="$OUT/kjv_$part"
  if [[ -f "$prefix.bin" && -f "$prefix.idx" && "$prefix.idx" -nt "$prefix.txt" ]]; then
    say "dataset already in place: $prefix.{bin,idx}"
    continue
  fi
  [[ -x "$BUILD/bin/loom-preprocess" ]] || {
    say "$BUILD/bin/loom-preprocess not found: build first (cmake --build $BUILD)" >&2; exit 1; }
  "$BUILD/bin/loom-preprocess" --input "$prefix.txt" --split-docs paragraph --append-eod --tokenizer gpt2 \
    --vocab "$ROOT/data/tokenizer/gpt2/encoder.json" --merges "$ROOT/data/tokenizer/gpt2/vocab.bpe" \
    --output-prefix "$prefix" --workers "$(nproc)"
done
say "ready: data/corpus/kjv_train and data/corpus/kjv_valid (GPT-2 ids, one document per chapter)"
