#!/usr/bin/env bash
# Benchmarks the tiktoken and tokenizer.json tokenizers, single thread, on real multilingual
# text: loom-preprocess --workers 1 against the JavaScript references (js-tiktoken for
# cl100k/o200k, the JavaScript port of Hugging Face tokenizers for Llama 3 / Qwen 3) on the same
# paragraphs, and checks that both produce the same ids. Prints MB/s of each and the ratio.
# Usage: scripts/bench_tokenizer.sh [MB (default 8)] [KIND...]   KIND: cl100k o200k llama3 qwen3
# Env: LOOM_BUILD_DIR (default build)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${LOOM_BUILD_DIR:-$ROOT/build}"
MB="${1:-8}"
shift || true
KINDS=("${@:-cl100k o200k llama3 qwen3}")
read -r -a KINDS <<<"${KINDS[*]}"
DIR="$ROOT/data/bench"
CORPUS="$DIR/multilingual_${MB}mb.txt"
TOK="$ROOT/data/tokenizer"
say() { echo "bench_tokenizer: $*"; }

[[ -x "$BUILD/bin/loom-preprocess" ]] || { say "build first: $BUILD/bin/loom-preprocess is missing" >&2; exit 1; }
command -v node >/dev/null && command -v npm >/dev/null || { say "needs node and npm (apt-get install -y nodejs npm)" >&2; exit 1; }
"$ROOT/scripts/get_tiktoken_ranks.sh" >/dev/null
"$ROOT/scripts/get_hf_tokenizers.sh" >/dev/null

# Real multilingual text from any Debian system: the translated messages of the gettext
# catalogs under /usr/share/locale (hundreds of languages and scripts), read with python3.
mkdir -p "$DIR"
if [[ ! -s "$CORPUS" ]]; then
  python3 - "$CORPUS" "$((MB * 1000000))" <<'PY'
import glob, struct, sys
out, total, limit = [], 0, int(sys.argv[2])
files = sorted(glob.glob("/usr/share/locale/*/LC_MESSAGES/*.mo"))
# Round-robin over languages so that every script is present whatever the size.
by_lang = {}
for f in files:
    by_lang.setdefault(f.split("/")[4], []).append(f)
order = [fs[i] for i in range(max(map(len, by_lang.values()))) for fs in by_lang.values() if i < len(fs)]
for f in order:
    d = open(f, "rb").read()
    if len(d) < 20 or struct.unpack("<I", d[:4])[0] != 0x950412DE:
        continue
    n, to = struct.unpack("<I", d[8:12])[0], struct.unpack("<I", d[16:20])[0]
    for i in range(1, n):  # entry 0 is the catalog header
        ln, off = struct.unpack("<2I", d[to + 8 * i:to + 8 * i + 8])
        try:
            s = d[off:off + ln].decode("utf-8").replace("\0", "\n")
        except UnicodeDecodeError:
            continue
        out.append(s)
        total += len(s.encode()) + 2
    if total >= limit:
        break
open(sys.argv[1] + ".tmp", "w").write("\n\n".join(out)[:limit])
PY
  iconv -f UTF-8 -t UTF-8 -c "$CORPUS.tmp" >"$CORPUS" && rm -f "$CORPUS.tmp"
fi
say "corpus: $CORPUS ($(wc -c <"$CORPUS") bytes), one document per paragraph"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && npm init -y >/dev/null 2>&1 &&
  npm install --silent --no-audit --no-fund js-tiktoken@1.0.21 @huggingface/tokenizers@0.2.0 >/dev/null 2>&1) ||
  { say "npm install of the references failed" >&2; exit 1; }
cat >"$TMP/ref.cjs" <<'JS'
// node ref.cjs KIND SPEC CORPUS OUT: encodes the paragraphs, times encode() only, writes uint32 ids.
const fs = require("fs");
const [kind, spec, corpus, out] = process.argv.slice(2);
let encode;
if (kind === "tiktoken") {
  const enc = require(__dirname + "/node_modules/js-tiktoken").getEncoding(spec);
  encode = (d) => enc.encode(d, [], []);
} else {
  const { Tokenizer } = require(__dirname + "/node_modules/@huggingface/tokenizers/dist/tokenizers.cjs");
  const tok = new Tokenizer(JSON.parse(fs.readFileSync(spec, "utf8")), {});
  encode = (d) => tok.encode(d, { add_special_tokens: false }).ids;
}
const docs = [];  // the same paragraphs as loom-preprocess --split-docs paragraph
let cur = [];
for (const line of fs.readFileSync(corpus, "utf8").split("\n")) {
  if (/^[ \t\r\f\v]*$/.test(line)) { if (cur.length) docs.push(cur.join("\n")); cur = []; }
  else cur.push(line);
}
if (cur.length) docs.push(cur.join("\n"));
const ids = [];
const t0 = process.hrtime.bigint();
for (const d of docs) for (const id of encode(d)) ids.push(id);
const sec = Number(process.hrtime.bigint() - t0) / 1e9;
fs.writeFileSync(out, Buffer.from(Uint32Array.from(ids).buffer));
const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d), 0);
console.log((bytes / 1e6 / sec).toFixed(2));
JS

printf '\n%-8s %-34s %12s %12s %7s  %s\n' kind "loom --tokenizer" "loom MB/s" "ref MB/s" ratio ids
for k in "${KINDS[@]}"; do
  case "$k" in
    cl100k | o200k) spec="tiktoken:$TOK/${k}_base.tiktoken" ref=(tiktoken "${k}_base") ;;
    llama3 | qwen3) spec="hf:$TOK/$k/tokenizer.json" ref=(hf "$TOK/$k/tokenizer.json") ;;
    *) say "unknown kind $k (cl100k o200k llama3 qwen3)" >&2; exit 1 ;;
  esac
  best=0
  for rep in 1 2; do  # best of two; MB/s as loom-preprocess reports it (load not included)
    line="$("$BUILD/bin/loom-preprocess" --input "$CORPUS" --split-docs paragraph --tokenizer "$spec" \
            --output-prefix "$TMP/loom_$k" --workers 1)"
    r="$(sed -n 's/.*(\([0-9.]*\) MB\/s.*/\1/p' <<<"$line")"
    best="$(awk -v a="$best" -v b="$r" 'BEGIN { print (b > a) ? b : a }')"
  done
  js="$(node "$TMP/ref.cjs" "${ref[@]}" "$CORPUS" "$TMP/ref_$k.bin")"
  same="identical"
  cmp -s "$TMP/ref_$k.bin" "$TMP/loom_$k.bin" || same="DIFFER"
  printf '%-8s %-34s %12s %12s %7s  %s\n' "$k" "${spec##*/}" "$best" "$js" \
    "$(awk -v a="$best" -v b="$js" 'BEGIN { printf "%.1fx", a / b }')" "$same"
done
echo "(one thread each, wall-clock MB/s: the reference times encode() only; node $(node --version), $(nproc) cores)"
