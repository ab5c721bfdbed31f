#!/usr/bin/env bash
# Regenerates gpt2_fixture.json: installs js-tiktoken into a temporary folder with npm, then runs
# make_fixture.cjs, which also cross-checks every case with gpt2_reference.py (python3-regex).
# Needs: node, npm, /usr/bin/python3 with python3-regex, and the GPT-2 files
# (scripts/get_gpt2_tokenizer.sh). Not run by CI: the fixture is committed.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
GPT2="$ROOT/data/tokenizer/gpt2"
[[ -f "$GPT2/encoder.json" ]] || "$ROOT/scripts/get_gpt2_tokenizer.sh"
/usr/bin/python3 -c 'import regex' 2>/dev/null || {
  echo "make_fixture: python3-regex is missing: apt-get install -y python3-regex" >&2; exit 1; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && npm init -y >/dev/null 2>&1 && npm install --silent --no-audit --no-fund js-tiktoken@1.0.21 >/dev/null 2>&1) || {
  echo "make_fixture: 'npm install js-tiktoken@1.0.21' failed" >&2; exit 1; }
node "$HERE/make_fixture.cjs" "$TMP" "$GPT2/encoder.json" "$GPT2/vocab.bpe" "$HERE/gpt2_fixture.json"
