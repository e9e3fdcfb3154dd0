#!/bin/sh
# install.sh - install the official ClickHouse JS client pinned by
# package-lock.json into test/client/node_modules (git-ignored), from the
# npm registry, and print the folder.  Idempotent: when the pinned version
# is installed already, nothing is downloaded.  npm's own output goes to
# stderr; stdout carries only the folder.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
want=$(sed -n 's/^[[:space:]]*"@clickhouse\/client":[[:space:]]*"\([^"]*\)".*/\1/p' "$here/package.json" | head -n 1)
pkg="$here/node_modules/@clickhouse/client/package.json"

installed_version() {
	[ -f "$pkg" ] || return 0
	sed -n 's/^[[:space:]]*"version"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' "$pkg" | head -n 1
}

if [ "$(installed_version)" != "$want" ]; then
	if ! command -v npm >/dev/null 2>&1; then
		echo "install.sh: npm is required to install @clickhouse/client@$want" >&2
		exit 1
	fi
	echo "install.sh: installing @clickhouse/client@$want into $here/node_modules" >&2
	(cd "$here" && npm ci --no-audit --no-fund >&2)
	if [ "$(installed_version)" != "$want" ]; then
		echo "install.sh: @clickhouse/client@$want missing after npm ci" >&2
		exit 1
	fi
fi
echo "$here"
