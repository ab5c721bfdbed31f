#!/usr/bin/env bash
# Puts the official OpenAI Node.js client (npm package openai 5.23.2, which has no dependencies)
# under data/clients/openai/, checksum-verified; tests/serve/test_serve_cli.sh drives loom serve
# with it. Idempotent. Needs npm (to fetch) and node (to run the test).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FETCH_NAME=get_openai_client
source "$ROOT/scripts/npm_fetch.sh"
DEST="${LOOM_OPENAI_CLIENT_DIR:-$ROOT/data/clients/openai}"
PKG=openai@5.23.2
SHA=a2aa74ff8be1a80a215af201a3d2228e999464d166c1eaec2c9ca313395fbef1  # of the npm tarball

if [[ -f "$DEST/.sha256" ]] && [[ "$(cat "$DEST/.sha256")" == "$SHA" ]] && [[ -f "$DEST/index.js" ]]; then
  say "already in place: $DEST"
  exit 0
fi
need_tools npm
fetch_tmp
npm_pack "$PKG" "$FETCH_TMP"
tgz=("$FETCH_TMP"/openai-*.tgz)
sha_is "${tgz[0]}" "$SHA" ||
  fail "checksum mismatch for $PKG: got $(sha256sum "${tgz[0]}" | cut -d' ' -f1), want $SHA"
tar -xzf "${tgz[0]}" -C "$FETCH_TMP"
rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
mv "$FETCH_TMP/package" "$DEST"
echo "$SHA" > "$DEST/.sha256"
say "installed $PKG in $DEST"
