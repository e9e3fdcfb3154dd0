# test/pg/majors.sh — sourced by test/sandbox.sh and test/pg/chroot.sh: the
# PostgreSQL majors dpwin is tested on, and where each one's Debian
# packages come from.
# shellcheck shell=bash
#
# 15 is the major of this machine's Debian release (bookworm): its packages
# are installed on the machine itself.  17, 18 and 19 are Debian's own
# packages from newer suites of the same mirror; their binaries need a newer
# glibc than bookworm's, so each runs inside a minimal chroot of its suite
# (test/pg/chroot.sh).  Versions are pinned so that every run tests the same
# server; when the mirror no longer has a pinned version, apt says so and
# the pin here is the one line to update.
#
# 16 is absent on purpose: no suite of the mirror ships its server headers
# (postgresql-server-dev-16), so it can be neither built nor tested here.

DPWIN_PG_MAJORS="15 17 18 19"

# pg_major_spec MAJOR: sets
#   PG_SUITE        Debian suite of the chroot ("" for the machine itself)
#   PG_EXTRA_SUITE  a further suite some packages come from ("" if none)
#   PG_FROM_EXTRA   those packages: the pinned ones and the libpq they need;
#                   nothing else is taken from PG_EXTRA_SUITE
#   PG_PACKAGES     the server, its PGXS headers and pg_cron, pinned
#   PG_CRON         1 when pg_cron is packaged for this major, else 0
pg_major_spec() {
	PG_EXTRA_SUITE=
	PG_FROM_EXTRA=
	case "$1" in
	15)
		PG_SUITE=
		PG_PACKAGES="postgresql-15 postgresql-server-dev-15 postgresql-15-cron"
		PG_CRON=1
		;;
	17)
		PG_SUITE=trixie
		PG_PACKAGES="postgresql-17=17.12-0+deb13u1 postgresql-server-dev-17=17.12-0+deb13u1 postgresql-17-cron=1.6.5-1"
		PG_CRON=1
		;;
	18)
		PG_SUITE=sid
		PG_PACKAGES="postgresql-18=18.6-3 postgresql-server-dev-18=18.6-3 postgresql-18-cron=1.6.8-1"
		PG_CRON=1
		;;
	19)
		# the release candidate; no pg_cron package exists for it yet.
		# 18 is installed beside it, from the same suite as 18's own
		# chroot: test/pg/upgrade.sh runs pg_upgrade from 18 to 19 here.
		PG_SUITE=sid
		PG_EXTRA_SUITE=experimental
		PG_FROM_EXTRA="postgresql-19 postgresql-client-19 postgresql-server-dev-19 libpq5 libpq-dev"
		PG_PACKAGES="postgresql-19=19~rc1-1 postgresql-server-dev-19=19~rc1-1 postgresql-18=18.6-3 postgresql-server-dev-18=18.6-3"
		PG_CRON=0
		;;
	16)
		echo "PostgreSQL 16 is not supported here: no suite of the Debian mirror ships postgresql-server-dev-16" >&2
		return 1
		;;
	*)
		echo "unknown PostgreSQL major '$1' (supported: $DPWIN_PG_MAJORS)" >&2
		return 1
		;;
	esac
}

# debian_mirror: the mirror of this machine's own release suite, as apt is
# configured (one-line or deb822 sources), or DPWIN_DEBIAN_MIRROR; nothing
# when apt names none.  test/pg/chroot.sh and test/pkg/check.sh make their
# roots from it.
debian_mirror() {
	if [ -n "${DPWIN_DEBIAN_MIRROR:-}" ]; then
		echo "$DPWIN_DEBIAN_MIRROR"
		return 0
	fi
	local codename
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	[ -n "$codename" ] || { echo "cannot tell this machine's Debian release (/etc/os-release)" >&2; return 1; }
	local files=() f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] && files+=("$f")
	done
	[ ${#files[@]} -gt 0 ] || return 0
	awk -v cn="$codename" '
			function flush() {
				if (uris != "" && types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " cn " ")) {
					split(uris, u, " "); print u[1]; found = 1; exit
				}
				uris = ""; suites = ""; types = ""
			}
			FNR == 1 { flush() }
			/^[[:space:]]*#/ { next }
			/^[[:space:]]*$/ { flush(); next }
			$1 == "deb" {
				i = 2
				if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
				if ($(i + 1) == cn) { print $i; found = 1; exit }
				next
			}
			$1 == "Types:" { $1 = ""; types = $0 }
			$1 == "URIs:" { $1 = ""; uris = $0 }
			$1 == "Suites:" { $1 = ""; suites = $0 }
			END { if (!found) flush() }' "${files[@]}" | head -1 | sed 's/^[[:space:]]*//'
}

# host_apt_get ARG...: apt-get ARG... on this machine, one at a time: the
# sandboxes, chroot makers and package check that test/check.sh runs side by
# side may each install what they miss, and apt-get refuses to run while
# another holds dpkg's lock.
host_apt_get() {
	mkdir -p /var/lock
	DEBIAN_FRONTEND=noninteractive flock /var/lock/dpwin-apt.lock \
		apt-get -o DPkg::Lock::Timeout=600 "$@"
}
