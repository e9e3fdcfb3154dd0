#!/bin/sh
# install-engine.sh - fetch the embedded ClickHouse engine (chDB's
# libchdb.so) used by test/chendpoint, and print its absolute path.
#
# The library comes from the npm package @chdb/lib-linux-x64-gnu, pinned
# below, installed under test/.engine/ (git-ignored).  Idempotent: when the
# pinned version is already there, nothing is downloaded.  npm's own output
# goes to stderr; stdout carries only the path, so callers can do
#     lib=$(test/install-engine.sh)
set -eu

PKG=@chdb/lib-linux-x64-gnu
VERSION=26.5.3

here=$(cd "$(dirname "$0")" && pwd)
prefix="$here/.engine"
pkgdir="$prefix/node_modules/$PKG"
lib="$pkgdir/libchdb.so"

# The version recorded in the installed package.json, if any.
installed_version() {
	[ -f "$pkgdir/package.json" ] || return 0
	sed -n 's/^[[:space:]]*"version"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' \
		"$pkgdir/package.json" | head -n 1
}

case "$(uname -s)/$(uname -m)" in
Linux/x86_64) ;;
*)
	echo "install-engine.sh: $PKG supports Linux x86_64 only" \
		"(this is $(uname -s)/$(uname -m))" >&2
	exit 1
	;;
esac

# One install at a time: the sandboxes of several majors may start side by
# side (test/check.sh), and each checks again once it holds the lock.
mkdir -p "$prefix"
exec 9>"$prefix/.install.lock"
flock 9
if [ "$(installed_version)" != "$VERSION" ] || [ ! -s "$lib" ]; then
	if ! command -v npm >/dev/null 2>&1; then
		echo "install-engine.sh: npm is required to fetch $PKG@$VERSION" >&2
		exit 1
	fi
	mkdir -p "$prefix"
	echo "install-engine.sh: installing $PKG@$VERSION into $prefix" >&2
	npm install --no-save --no-audit --no-fund --prefix "$prefix" \
		"$PKG@$VERSION" >&2
	if [ "$(installed_version)" != "$VERSION" ] || [ ! -s "$lib" ]; then
		echo "install-engine.sh: $lib missing after npm install" >&2
		exit 1
	fi
fi

echo "$lib"
