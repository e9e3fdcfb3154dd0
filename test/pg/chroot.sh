#!/usr/bin/env bash
#
# test/pg/chroot.sh — the Debian chroots that hold PostgreSQL 17, 18 and 19
# (test/pg/majors.sh says why and which packages).
#
#   ensure MAJOR
#       create the chroot of MAJOR under test/.pg/MAJOR (git-ignored) if it
#       is missing or was made from other pins, and print its path; reused
#       as it is otherwise.  One to two minutes and 1.5 GB per major.
#   run MAJOR [--user USER] [--bind DIR]... -- COMMAND [ARG...]
#       run COMMAND in the chroot of MAJOR, as root or as USER, with each
#       DIR of the machine visible inside at the same path (so that a
#       sandbox's data directory, socket directory and logs have one path
#       for the server in the chroot and for the tests outside it).  PG*
#       variables pass through; the rest of the environment is reset.
#
# Every mount (the bind mounts, /proc, a private /dev/shm) is made in a
# mount namespace of its own (unshare), so it exists only for the command
# and the processes it leaves running (a postmaster), is never visible on
# the machine, and disappears with them: removing test/.pg can never reach
# through a forgotten mount into the work tree.
#
# The mirror is the one apt is configured with on this machine
# (/etc/apt/sources.list*, the entry of this release's suite), or
# DPWIN_DEBIAN_MIRROR.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/test/pg/majors.sh"

log() { printf 'chroot: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# What every chroot holds besides PostgreSQL: what dpwin builds with.
BUILD_PACKAGES="make gcc libcurl4-openssl-dev libssl-dev"

# The pins a chroot was made from, recorded in it: a chroot made from other
# pins is made again.
spec_of() {
	echo "suite=$PG_SUITE extra=$PG_EXTRA_SUITE:$PG_FROM_EXTRA packages=$PG_PACKAGES build=$BUILD_PACKAGES"
}

# Refuse to remove a chroot that a process still runs in (a sandbox's
# server) or that something is mounted under.
check_unused() {
	local dir=$1 p
	grep -q " $dir[/ ]" /proc/mounts && die "something is mounted under $dir; not removing it"
	for p in /proc/[0-9]*; do
		[ "$(readlink "$p/root" 2>/dev/null)" = "$dir" ] &&
			die "process ${p#/proc/} runs in $dir (a sandbox of this major?); stop it first"
	done
	return 0
}

# in_ns CHROOT_DIR COMMAND...: run a command of the machine with /proc
# mounted in the chroot, in a mount namespace of its own.
in_ns() {
	local dir=$1
	shift
	DPWIN_NS_DIR=$dir unshare --mount --propagation private -- bash -c \
		'mount -t proc proc "$DPWIN_NS_DIR/proc" && exec "$@"' _ "$@"
}

# apt-get in the chroot; its chatter goes to the chroot's .dpwin-apt.log,
# shown when it fails.
apt_in() {
	local dir=$1
	shift
	if ! in_ns "$dir" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
		chroot "$dir" apt-get -q -y -o Dpkg::Options::=--force-confold "$@" >>"$dir/.dpwin-apt.log" 2>&1; then
		tail -30 "$dir/.dpwin-apt.log" >&2
		die "apt-get $* failed in $dir"
	fi
}

make_chroot() {
	local major=$1 dir=$2 mirror new
	mirror=$(debian_mirror)
	[ -n "$mirror" ] || die "no Debian mirror in /etc/apt/sources.list*; set DPWIN_DEBIAN_MIRROR"
	new=$dir.new
	if [ -e "$new" ]; then
		check_unused "$new"
		rm -rf --one-file-system "$new"
	fi
	log "making the PostgreSQL $major chroot: Debian $PG_SUITE${PG_EXTRA_SUITE:+ + $PG_EXTRA_SUITE} from $mirror"
	mkdir -p "$(dirname "$dir")"
	in_ns_debootstrap "$PG_SUITE" "$new" "$mirror"

	# The mirror may be a frozen snapshot whose newer release files have
	# expired; no daemon may start at package installation; no default
	# cluster (the sandboxes make their own).
	cat >"$new/etc/apt/apt.conf.d/99dpwin" <<-'EOF'
		Acquire::Check-Valid-Until "false";
		Acquire::Check-Date "false";
		APT::Install-Recommends "false";
		Acquire::Languages "none";
	EOF
	if [ -n "$PG_EXTRA_SUITE" ]; then
		echo "deb $mirror $PG_EXTRA_SUITE main" >"$new/etc/apt/sources.list.d/$PG_EXTRA_SUITE.list"
		# only these packages come from it; everything else from $PG_SUITE
		cat >"$new/etc/apt/preferences.d/dpwin" <<-EOF
			Package: $PG_FROM_EXTRA
			Pin: release a=$PG_EXTRA_SUITE
			Pin-Priority: 990
		EOF
	fi
	printf '#!/bin/sh\nexit 101\n' >"$new/usr/sbin/policy-rc.d"
	chmod 755 "$new/usr/sbin/policy-rc.d"
	mkdir -p "$new/etc/postgresql-common"
	echo "create_main_cluster = false" >"$new/etc/postgresql-common/createcluster.conf"

	apt_in "$new" update
	apt_in "$new" install $BUILD_PACKAGES
	apt_in "$new" install $PG_PACKAGES
	apt_in "$new" clean
	spec_of >"$new/.dpwin-spec"

	if [ -e "$dir" ]; then
		check_unused "$dir"
		rm -rf --one-file-system "$dir"
	fi
	mv "$new" "$dir"
	log "PostgreSQL $major chroot ready: $dir"
}

# debootstrap mounts /proc and /sys in the target while it works: in a
# namespace of its own, an interrupted run leaves nothing mounted.
in_ns_debootstrap() {
	local suite=$1 target=$2 mirror=$3 out
	out=$(mktemp)
	if ! unshare --mount --propagation private -- \
		debootstrap --variant=minbase "$suite" "$target" "$mirror" >"$out" 2>&1; then
		tail -20 "$out" >&2
		rm -f "$out"
		die "debootstrap of $suite failed (its log: $target/debootstrap/debootstrap.log)"
	fi
	rm -f "$out"
}

# debootstrap on the machine, installed once even when several majors'
# chroots are made side by side.
need_debootstrap() {
	command -v debootstrap >/dev/null && return 0
	(
		flock 8
		command -v debootstrap >/dev/null && exit 0
		log "installing debootstrap"
		host_apt_get update -qq
		host_apt_get install -y -qq debootstrap >/dev/null
	) 8>"$ROOT/test/.pg/apt.lock"
}

cmd_ensure() {
	local major=$1 dir
	pg_major_spec "$major"
	[ -n "$PG_SUITE" ] || die "PostgreSQL $major runs on the machine itself, not in a chroot"
	dir=$ROOT/test/.pg/$major
	mkdir -p "$ROOT/test/.pg"
	need_debootstrap
	# one maker at a time per major: sandboxes may start side by side
	exec 9>"$ROOT/test/.pg/$major.lock"
	flock 9
	if [ ! -f "$dir/.dpwin-spec" ] || [ "$(cat "$dir/.dpwin-spec")" != "$(spec_of)" ]; then
		make_chroot "$major" "$dir"
	fi
	echo "$dir"
}

cmd_run() {
	local major=$1 dir user="" binds=() envs=() v
	shift
	pg_major_spec "$major"
	dir=$ROOT/test/.pg/$major
	[ -f "$dir/.dpwin-spec" ] || die "no PostgreSQL $major chroot: test/pg/chroot.sh ensure $major"
	while [ $# -gt 0 ]; do
		case "$1" in
		--user) user=$2; shift 2 ;;
		--bind) binds+=("$(cd "$2" && pwd)"); shift 2 ;;
		--) shift; break ;;
		*) die "run: unknown option $1" ;;
		esac
	done
	[ $# -gt 0 ] || die "run: no command"
	for v in $(compgen -e); do
		case "$v" in PG[A-Z]*) envs+=("$v=${!v}") ;; esac
	done
	local home=/root
	[ -z "$user" ] || home=$(awk -F: -v u="$user" '$1 == u { print $6 }' "$dir/etc/passwd")
	DPWIN_NS_DIR=$dir DPWIN_NS_USER=$user DPWIN_NS_BINDS=$(printf '%s\n' ${binds[@]+"${binds[@]}"}) \
		exec unshare --mount --propagation private -- bash -c '
		set -e
		mount -t proc proc "$DPWIN_NS_DIR/proc"
		mount -t tmpfs -o mode=1777,size=1g tmpfs "$DPWIN_NS_DIR/dev/shm"
		while IFS= read -r b; do
			[ -n "$b" ] || continue
			mkdir -p "$DPWIN_NS_DIR$b"
			mount --bind "$b" "$DPWIN_NS_DIR$b"
		done <<<"$DPWIN_NS_BINDS"
		if [ -n "$DPWIN_NS_USER" ]; then
			set -- --userspec="$DPWIN_NS_USER:$DPWIN_NS_USER" "$DPWIN_NS_DIR" "$@"
		else
			set -- "$DPWIN_NS_DIR" "$@"
		fi
		exec chroot "$@"' _ \
		env -i PATH="/usr/lib/postgresql/$major/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		HOME="$home" LANG=C.UTF-8 "${envs[@]}" "$@"
}

[ "$(id -u)" = 0 ] || die "PostgreSQL 17 and later run in a chroot, which needs root (chroot, mount namespaces)"

case "${1:-}" in
	ensure)
		[ $# -eq 2 ] || die "usage: $0 ensure MAJOR"
		cmd_ensure "$2"
		;;
	run)
		[ $# -ge 3 ] || die "usage: $0 run MAJOR [--user USER] [--bind DIR]... -- COMMAND [ARG...]"
		shift
		cmd_run "$@"
		;;
	*)
		echo "usage: $0 ensure MAJOR | run MAJOR [--user USER] [--bind DIR]... -- COMMAND [ARG...]" >&2
		exit 2
		;;
esac
