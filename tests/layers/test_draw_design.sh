#!/usr/bin/env bash
# scripts/draw_design.py: both pictures of docs/design.md are well-formed SVG, the layer picture
# has a box for every declared layer folder and the include counts of the tree, the committed
# pictures are current, and every check can fail: a picture missing a folder, with a wrong count
# or cut short, a planted upward include (drawn red, and the committed picture then stale) and a
# renamed call on the step's path are each caught.
set -euo pipefail
py="${LOOM_PYTHON3:-python3}"  # the tests' interpreter (tests/CMakeLists.txt)
repo=$(cd "$(dirname "$0")/../.." && pwd)
draw="$repo/scripts/draw_design.py"
verify="$repo/tests/layers/verify_design_svg.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PYTHONDONTWRITEBYTECODE=1

# Refused: runs `$@`, which must exit 1 and print a line matching $pattern.
refused() {
  local what=$1 pattern=$2
  shift 2
  set +e
  local out
  out=$("$@" 2>&1)
  local rc=$?
  set -e
  [[ $rc -eq 1 ]] || { echo "$out"; echo "FAIL: $what was not refused (exit $rc)"; exit 1; }
  grep -qE -- "$pattern" <<<"$out" || { echo "$out"; echo "FAIL: $what: no '$pattern'"; exit 1; }
  echo "ok: $what refused: $(grep -E -- "$pattern" <<<"$out" | head -1)"
}

# The tree's pictures pass, and the committed ones are what the tree gives now.
"$py" "$draw" --repo "$repo" --out "$tmp/out" >/dev/null
"$py" "$verify" "$repo" "$tmp/out"
"$py" "$draw" --repo "$repo" --check

# A picture without the box of src/pipeline, one with a wrong count, one cut short.
bad="$tmp/bad"
mkdir -p "$bad"
cp "$tmp/out/step.svg" "$bad/"
sed 's|>src/pipeline<|>src/pipe<|' "$tmp/out/layers.svg" >"$bad/layers.svg"
refused "a picture missing a folder" "no box for the layer folder 'src/pipeline'" \
  "$py" "$verify" "$repo" "$bad"
sed -E 's/(backend includes kernels: )[0-9]+/\1999/' "$tmp/out/layers.svg" >"$bad/layers.svg"
refused "a wrong include count" \
  "backend includes kernels: the tree has [0-9]+ #include lines, the picture 999" \
  "$py" "$verify" "$repo" "$bad"
head -c 2000 "$tmp/out/layers.svg" >"$bad/layers.svg"
refused "a truncated picture" "not well-formed SVG" "$py" "$verify" "$repo" "$bad"

# A copy of the tree with an upward include: drawn red, counted, and the committed picture stale.
tree="$tmp/tree"
mkdir -p "$tree/docs"
cp -r "$repo/scripts" "$repo/src" "$repo/kernels" "$repo/data_tools" "$tree/"
cp -r "$repo/docs/images" "$tree/docs/"
printf '#include "model/block.h"\n' >"$tree/src/core/planted.h"
"$py" "$draw" --repo "$tree" --out "$tmp/planted" >/dev/null
grep -q 'class="up"' "$tmp/planted/layers.svg" || { echo "FAIL: no red upward arc"; exit 1; }
grep -q 'core includes model: 1 #include line (points up' "$tmp/planted/layers.svg" ||
  { echo "FAIL: the upward include is not named"; exit 1; }
"$py" "$verify" "$tree" "$tmp/planted" >/dev/null
refused "a stale committed picture" "docs/images/layers.svg is stale" \
  "$py" "$draw" --repo "$tree" --check

# A call of the step's path renamed in the copy: the step picture refuses to draw.
rm "$tree/src/core/planted.h"
sed -i 's/reduce_grads_and_norm/reduce_gradients/g' "$tree/src/optim/zero.cpp"
refused "a renamed call" "src/optim/zero.cpp: no 'void ZeroOptimizer::reduce_grads_and_norm\(" \
  "$py" "$draw" --repo "$tree" --out "$tmp/renamed"
echo "PASS"
