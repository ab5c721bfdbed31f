#!/usr/bin/env bash
# The include layering of the tree (scripts/check_layers.py) holds, and the check can fail: a
# copy of the layer folders with one planted upward include and one bare include is refused,
# naming both.
set -euo pipefail
py="${LOOM_PYTHON3:-python3}"  # the tests' interpreter (tests/CMakeLists.txt)
repo=$(cd "$(dirname "$0")/../.." && pwd)
check="$repo/scripts/check_layers.py"
"$py" "$check" "$repo"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/scripts" "$tmp/src" "$tmp/kernels" "$tmp/data_tools"
for d in core config backend parallel model layout data optim pipeline ckpt plan train serve cli; do
  mkdir -p "$tmp/src/$d"
done
printf '#include "model/block.h"\n' >"$tmp/src/core/planted.h"  # core may not use model
printf '#include "tokenizer.h"\n' >"$tmp/src/cli/bare.cpp"       # not a path from the root
printf '#include "core/check.h"\n' >"$tmp/src/train/fine.cpp"    # looking down is fine
set +e
out=$("$py" "$check" "$tmp" 2>&1)
rc=$?
set -e
echo "$out"
[[ $rc -eq 1 ]] || { echo "FAIL: a planted upward include passed the check"; exit 1; }
grep -q "src/core/planted.h:1: #include \"model/block.h\" points up" <<<"$out" ||
  { echo "FAIL: the upward include is not named"; exit 1; }
grep -q "src/cli/bare.cpp:1: #include \"tokenizer.h\" by a bare name" <<<"$out" ||
  { echo "FAIL: the bare include is not named"; exit 1; }
grep -q "2 fault(s)" <<<"$out" || { echo "FAIL: expected exactly the 2 planted faults"; exit 1; }
echo "PASS"
