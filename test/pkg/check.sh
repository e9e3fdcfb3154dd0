#!/usr/bin/env bash
#
# test/pkg/check.sh — the Debian package, as a DBA gets it: build
# postgresql-15-dpwin from the committed tree with pg_buildext (debian/),
# check it with lintian, install it with dpkg into a clean Debian 12 root
# (debootstrap; PostgreSQL 15 from Debian's packages), start a cluster there
# and run the demo route (test/demo.sh) against the installed package, with
# the ClickHouse endpoint of a sandbox (test/sandbox.sh start; the sandbox's
# own PostgreSQL is not used).
#
# Needs root (debootstrap, chroot, mount namespaces).  The root is kept
# under test/.pg/pkg-bookworm and reused; the package and the cluster are
# made afresh each run.  Exits non-zero on any failure, lintian's included.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
. test/pg/majors.sh
MAJOR=15
SUITE=bookworm
CHROOT=$ROOT/test/.pg/pkg-$SUITE
started=$(date +%s)

log() { printf 'pkg: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot)"

# --- what the build and the root need on this machine ---------------------

need=()
for p in debhelper lintian postgresql-server-dev-all dpkg-dev fakeroot debootstrap \
	libcurl4-openssl-dev libssl-dev "postgresql-server-dev-$MAJOR"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
	log "installing ${need[*]}"
	host_apt_get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi

# --- build and lint --------------------------------------------------------

t0=$(date +%s)
WORK=$(mktemp -d)
version=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" dpwin.control)
if [ -n "${DPWIN_PKG_DEB:-}" ]; then
	# a package built before (by this script): only its installation is tested
	deb=$DPWIN_PKG_DEB
	log "using $deb as built before"
else
	src=$WORK/dpwin-$version
	mkdir -p "$src"
	# the committed tree only, as a release is made
	git ls-files -z | xargs -0 tar -c | tar -C "$src" -x
	log "building postgresql-$MAJOR-dpwin $version"
	(cd "$src" && pg_buildext updatecontrol && dpkg-buildpackage -us -uc -b >"$WORK/build.log" 2>&1) ||
		{ tail -40 "$WORK/build.log"; die "dpkg-buildpackage failed"; }
	deb=$(ls "$WORK"/postgresql-$MAJOR-dpwin_*.deb)
	log "built $(basename "$deb") in $(($(date +%s) - t0)) s"
	dpkg-deb -c "$deb" | awk '{print $6}' | grep -E 'dpwin(\.so|\.control|--)' >&2

	log "lintian"
	lintian --fail-on error,warning "$WORK"/*.changes
	log "lintian: no error, no warning"
fi

# --- a clean root with PostgreSQL 15, then dpkg -i ---------------------------

mirror=$(debian_mirror)
[ -n "$mirror" ] || die "no Debian mirror in /etc/apt/sources.list*; set DPWIN_DEBIAN_MIRROR"
# The root's cluster lives in RUN, seen at the same path inside the root
# and on the machine, so that psql and the demo reach its socket.
RUN=$ROOT/test/.pg/pkg-run
in_root() {
	DPWIN_NS_DIR=$CHROOT DPWIN_NS_RUN=$RUN unshare --mount --propagation private -- bash -c '
		mount -t proc proc "$DPWIN_NS_DIR/proc"
		mount -t tmpfs -o mode=1777 tmpfs "$DPWIN_NS_DIR/dev/shm"
		mkdir -p "$DPWIN_NS_DIR$DPWIN_NS_RUN"
		mount --bind "$DPWIN_NS_RUN" "$DPWIN_NS_DIR$DPWIN_NS_RUN"
		exec chroot "$DPWIN_NS_DIR" "$@"' _ \
		env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}
if [ ! -f "$CHROOT/.dpwin-pkg-root" ]; then
	log "making a clean Debian $SUITE root from $mirror"
	rm -rf --one-file-system "$CHROOT"
	mkdir -p "$CHROOT"
	unshare --mount --propagation private -- debootstrap --variant=minbase "$SUITE" "$CHROOT" "$mirror" >"$WORK/debootstrap.log" 2>&1 ||
		{ tail -20 "$WORK/debootstrap.log"; die "debootstrap failed"; }
	printf '#!/bin/sh\nexit 101\n' >"$CHROOT/usr/sbin/policy-rc.d"
	chmod 755 "$CHROOT/usr/sbin/policy-rc.d"
	# the machine's Debian sources (its updates and security suites too):
	# the package depends on the PostgreSQL it was built against
	if [ -z "${DPWIN_DEBIAN_MIRROR:-}" ]; then
		rm -f "$CHROOT/etc/apt/sources.list"
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
			[ -f "$f" ] && cp "$f" "$CHROOT$f"
		done
	fi
	mkdir -p "$CHROOT/etc/postgresql-common"
	echo "create_main_cluster = false" >"$CHROOT/etc/postgresql-common/createcluster.conf"
	touch "$CHROOT/.dpwin-pkg-root"
fi
rm -rf "$RUN"
mkdir -p "$RUN"
# What the package depends on (PostgreSQL itself, libcurl) from Debian;
# dpwin only from the package built above
deps=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/[(|].*//; s/ //g' | grep -v '^$' | tr '\n' ' ')
in_root dpkg --purge "postgresql-$MAJOR-dpwin" >/dev/null 2>&1 || true
in_root apt-get -q -y update >/dev/null 2>&1
in_root apt-get -q -y install --no-install-recommends $deps >"$WORK/apt.log" 2>&1 ||
	{ tail -20 "$WORK/apt.log"; die "apt-get install $deps failed in the root"; }
cp "$deb" "$RUN/"
log "dpkg -i $(basename "$deb")"
if ! in_root dpkg -i "$RUN/$(basename "$deb")" >"$WORK/dpkg.log" 2>&1; then
	cat "$WORK/dpkg.log" >&2
	die "dpkg -i failed"
fi
in_root dpkg -s "postgresql-$MAJOR-dpwin" | grep -q '^Status: install ok installed' || die "not installed"
[ -f "$CHROOT/usr/lib/postgresql/$MAJOR/lib/dpwin.so" ] || die "no dpwin.so in the root"
[ -f "$CHROOT/usr/share/postgresql/$MAJOR/extension/dpwin--0.1.0--$version.sql" ] || die "no update script in the root"

# --- a cluster in the root, and the demo against it -------------------------

# the sandbox's ClickHouse endpoint (it also builds dpwin for its own
# PostgreSQL, which this test does not use)
test/sandbox.sh status | grep -q 'clickhouse: running' || test/sandbox.sh start >/dev/null
eval "$(test/sandbox.sh env)"
port=$((PGPORT + 60))
chown -R 0:0 "$RUN"
in_root bash -c "chown postgres:postgres $RUN && su postgres -s /bin/sh -c \
	'/usr/lib/postgresql/$MAJOR/bin/initdb -D $RUN/pg -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null'"
cat >>"$RUN/pg/postgresql.conf" <<EOF
port = $port
listen_addresses = ''
unix_socket_directories = '$RUN'
shared_preload_libraries = 'dpwin'
EOF
stop_pg() {
	[ -f "$RUN/pg/postmaster.pid" ] &&
		in_root su postgres -s /bin/sh -c "/usr/lib/postgresql/$MAJOR/bin/pg_ctl -D $RUN/pg -m fast -w stop" >/dev/null 2>&1
	rm -rf "$WORK"
}
trap stop_pg EXIT
in_root su postgres -s /bin/sh -c "/usr/lib/postgresql/$MAJOR/bin/pg_ctl -D $RUN/pg -l $RUN/pg.log -w -t 60 start" >/dev/null

# the host sees the root's socket folder through the bind mount's source
export PGHOST=$RUN PGPORT=$port PGUSER=postgres PGDATABASE=demo
psql -X -q -d postgres -c "CREATE DATABASE demo"
psql -X -q -v ON_ERROR_STOP=1 <<SQL
CREATE EXTENSION dpwin;
CREATE SERVER sandbox_ch FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url '$DPWIN_CH_URL');
CREATE USER MAPPING FOR CURRENT_USER SERVER sandbox_ch
	OPTIONS (user '$DPWIN_CH_REFRESH_USER', password '$DPWIN_CH_PASSWORD');
SQL
ext=$(psql -X -A -t -c "SELECT extversion FROM pg_extension WHERE extname = 'dpwin'")
[ "$ext" = "$version" ] || die "installed extension version $ext, expected $version"
log "cluster in the root: dpwin $ext from the package"

DPWIN_DEMO_ENV=1 test/demo.sh >"$WORK/demo.out" 2>&1 || { cat "$WORK/demo.out"; die "the demo failed"; }
cat "$WORK/demo.out"
state=$(psql -X -A -t -c "SELECT state FROM dpwin.invocations WHERE route_name = 'demo_events' ORDER BY created_at DESC LIMIT 1")
[ "$state" = completed ] || die "the demo's refresh is '$state', not completed"
log "package check passed in $(($(date +%s) - started)) s"
