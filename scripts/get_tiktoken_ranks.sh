#!/usr/bin/env bash
# Puts the tiktoken rank files cl100k_base.tiktoken, o200k_base.tiktoken and r50k_base.tiktoken
# under data/tokenizer/, converted from the npm package js-tiktoken (which ships the same ranks in
# a compact form) to the standard "base64(token) rank" lines. Each result must have the sha256
# of OpenAI's published file of that name. Idempotent. Needs npm and node.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FETCH_NAME=get_tiktoken_ranks
source "$ROOT/scripts/npm_fetch.sh"
DEST="${LOOM_TIKTOKEN_DIR:-$ROOT/data/tokenizer}"
PKG="js-tiktoken@1.0.21"
NAMES=(cl100k_base o200k_base r50k_base)
declare -A SHA=(
  [cl100k_base]=223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7
  [o200k_base]=446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d
  [r50k_base]=306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930
)

missing=0
for n in "${NAMES[@]}"; do sha_is "$DEST/$n.tiktoken" "${SHA[$n]}" || missing=1; done
if [[ $missing == 0 ]]; then
  say "already in place: $DEST/{cl100k_base,o200k_base,r50k_base}.tiktoken"
  exit 0
fi
need_tools npm node
fetch_tmp
npm_pack "$PKG" "$FETCH_TMP"
tar -xzf "$FETCH_TMP"/js-tiktoken-*.tgz -C "$FETCH_TMP" package/dist/ranks
# The package's ranks/NAME.cjs is "module.exports = {JSON};" whose bpe_ranks string holds lines
# "! FIRST_RANK TOKEN TOKEN ..." (base64 tokens with consecutive ranks). Read as JSON, not run.
cat >"$FETCH_TMP/convert.cjs" <<'JS'
"use strict";
const fs = require("fs");
const [src, out] = process.argv.slice(2);
const text = fs.readFileSync(src, "utf8").trim();
const head = "module.exports = ";
if (!text.startsWith(head)) throw new Error(src + ": unexpected layout");
const data = JSON.parse(text.slice(head.length).replace(/;$/, ""));
const rows = [];
for (const line of data.bpe_ranks.split("\n")) {
  if (!line) continue;
  const f = line.split(" ");
  const first = Number.parseInt(f[1], 10);
  for (let i = 2; i < f.length; ++i) rows.push([first + i - 2, f[i]]);
}
rows.sort((a, b) => a[0] - b[0]);
fs.writeFileSync(out, rows.map(([rank, tok]) => tok + " " + rank + "\n").join(""));
JS
for n in "${NAMES[@]}"; do
  node "$FETCH_TMP/convert.cjs" "$FETCH_TMP/package/dist/ranks/$n.cjs" "$FETCH_TMP/$n.tiktoken"
  sha_is "$FETCH_TMP/$n.tiktoken" "${SHA[$n]}" ||
    fail "$n.tiktoken converted from $PKG does not have the expected sha256; not installing it"
done
for n in "${NAMES[@]}"; do install_file "$FETCH_TMP/$n.tiktoken" "$DEST/$n.tiktoken"; done
say "wrote $DEST/{cl100k_base,o200k_base,r50k_base}.tiktoken (100256, 199998 and 50256 ranks)"
