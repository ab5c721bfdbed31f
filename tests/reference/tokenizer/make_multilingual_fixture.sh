#!/usr/bin/env bash
# Regenerates multilingual_fixture.json and multilingual_ids.json.gz: installs the reference
# encoders (js-tiktoken, @huggingface/tokenizers) into a temporary folder with npm and runs
# make_multilingual_fixture.cjs. Needs node, npm, Debian's bible-kjv and glibc's locale sources
# (/usr/share/i18n/locales), and the Llama 3 / Qwen 3 tokenizer.json files
# (scripts/get_hf_tokenizers.sh). Not run by CI: the fixture is committed.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
"$ROOT/scripts/get_hf_tokenizers.sh" >/dev/null
command -v bible >/dev/null || { echo "make_multilingual_fixture: apt-get install -y bible-kjv" >&2; exit 1; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && npm init -y >/dev/null 2>&1 &&
  npm install --silent --no-audit --no-fund js-tiktoken@1.0.21 @huggingface/tokenizers@0.2.0 >/dev/null 2>&1) || {
  echo "make_multilingual_fixture: 'npm install js-tiktoken @huggingface/tokenizers' failed" >&2; exit 1; }
node "$HERE/make_multilingual_fixture.cjs" "$TMP" "$ROOT/data/tokenizer" "$HERE"
