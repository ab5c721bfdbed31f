#!/usr/bin/env bash
# Puts the official OpenAI Node.js client (npm package openai 5.23.2, which has no dependencies)
# under data/clients/openai/, checksum-verified; tests/serve/test_serve_cli.sh drives loom serve
# with it. Idempotent. Needs npm (to fetch) and node (to run the test).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${LOOM_OPENAI_CLIENT_DIR:-$ROOT/data/clients/openai}"
PKG=openai@5.23.2
SHA=a2aa74ff8be1a80a215af201a3d2228e999464d166c1eaec2c9ca313395fbef1  # of the npm tarball
say() { echo "get_openai_client: $*"; }

if [[ -f "$DEST/.sha256" ]] && [[ "$(cat "$DEST/.sha256")" == "$SHA" ]] && [[ -f "$DEST/index.js" ]]; then
  say "already in place: $DEST"
  exit 0
fi
command -v npm > /dev/null 2>&1 ||
  { say "npm is not installed; install it with 'apt-get install -y npm' and re-run" >&2; exit 1; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
say "fetching $PKG from the npm registry"
# 'npm pack' only downloads the package tarball: no dependencies, no install scripts run.
if ! (cd "$TMP" && npm pack "$PKG" --silent > pack.log 2>&1); then
  say "'npm pack $PKG' failed:" >&2
  sed 's/^/  /' "$TMP/pack.log" >&2
  exit 1
fi
got="$(sha256sum "$TMP"/openai-*.tgz | cut -d' ' -f1)"
if [[ "$got" != "$SHA" ]]; then
  say "checksum mismatch for $PKG: got $got, want $SHA" >&2
  exit 1
fi
tar -xzf "$TMP"/openai-*.tgz -C "$TMP"
rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
mv "$TMP/package" "$DEST"
echo "$SHA" > "$DEST/.sha256"
say "installed $PKG in $DEST"
