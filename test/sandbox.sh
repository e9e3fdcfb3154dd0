#!/usr/bin/env bash
#
# test/sandbox.sh start|stop|restart-pg|restart-ch|stop-ch|start-ch|env|status|pg-exec|make
#
# A throwaway PostgreSQL cluster with dpwin and pg_cron preloaded, plus
# the local ClickHouse endpoint (test/chendpoint) on the embedded engine,
# both on loopback and both living under the sandbox folder (git-ignored).
#
#   start       install what is missing, build, install, start both (idempotent)
#   stop        stop both, by the pids they recorded
#   restart-pg  immediate restart of PostgreSQL (crash tests)
#   restart-ch  restart of the ClickHouse endpoint (data persists)
#   stop-ch, start-ch  the same in two steps, for a test that keeps the
#               endpoint away while it watches what dpwin does meanwhile
#   env         print `export` lines for PGHOST, PGPORT, PGDATABASE, PGUSER,
#               DPWIN_CH_URL, DPWIN_CH_USER (the admin account), DPWIN_CH_REFRESH_USER
#               (the least-privileged one sandbox_ch maps to), DPWIN_CH_PASSWORD,
#               DPWIN_CH_CONTROL_URL, DPWIN_PG, DPWIN_SANDBOX_DIR, and the
#               server's side: DPWIN_PGDATA, DPWIN_PGBIN and PG_CONFIG (paths
#               inside DPWIN_PG_CHROOT when that is set)
#   status      whether each of the two runs
#   pg-exec CMD run the shell command CMD as the postgres OS user where the
#               sandbox's PostgreSQL runs (in its chroot for 17 and later,
#               which sees the machine's sandbox folder and /tmp only)
#   make ARG... run make ARG... in the sandbox's build of dpwin, with the
#               sandbox's PostgreSQL (test/check.sh: regress, isolation)
#
# DPWIN_PG selects the PostgreSQL major: 15 (the default: this machine's
# Debian packages), 17, 18 or 19 (Debian's packages of newer suites, run in
# a chroot that test/pg/chroot.sh makes; test/pg/majors.sh lists them).
# The folder (DPWIN_SANDBOX_DIR; by default test/.sandbox for 15 and
# test/.sandbox-<major> for the others) remembers its major, so later
# commands on it need only the folder.  Ports can be chosen with
# DPWIN_PGPORT, DPWIN_CH_PORT and DPWIN_CH_CONTROL_PORT (each major has
# defaults of its own), so that several sandboxes can run side by side.
# `start` also creates the foreign server `sandbox_ch` for the endpoint.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/test/pg/majors.sh"

PGMAJOR=${DPWIN_PG:-}
if [ -n "${DPWIN_SANDBOX_DIR:-}" ]; then
	SB=$DPWIN_SANDBOX_DIR
	[ -n "$PGMAJOR" ] || PGMAJOR=$(cat "$SB/pg_major" 2>/dev/null || true)
	PGMAJOR=${PGMAJOR:-15}
else
	PGMAJOR=${PGMAJOR:-15}
	if [ "$PGMAJOR" = 15 ]; then SB=$ROOT/test/.sandbox; else SB=$ROOT/test/.sandbox-$PGMAJOR; fi
fi
pg_major_spec "$PGMAJOR" || exit 2
if [ -f "$SB/pg_major" ] && [ "$(cat "$SB/pg_major")" != "$PGMAJOR" ]; then
	echo "sandbox: $SB is a PostgreSQL $(cat "$SB/pg_major") sandbox, not $PGMAJOR:" \
		"stop and remove it, or choose another DPWIN_SANDBOX_DIR" >&2
	exit 2
fi

if [ -z "$PG_SUITE" ]; then
	# Each sandbox installs dpwin into a private copy of the PostgreSQL
	# installation (PostgreSQL finds its lib and share folders relative to
	# its binaries), so that side-by-side sandboxes of different work trees
	# never overwrite each other's dpwin.so.
	PGCHROOT=
	PGROOT=$SB/pgroot
	PGBIN=$PGROOT/usr/lib/postgresql/$PGMAJOR/bin
else
	# The work tree's chroot of this major is its private installation; the
	# sandbox folder has the same path inside it as outside.
	PGCHROOT=$ROOT/test/.pg/$PGMAJOR
	PGBIN=/usr/lib/postgresql/$PGMAJOR/bin
fi
PG_CONFIG_=$PGBIN/pg_config
# The default ports lie below the kernel's range of ephemeral ports
# (32768 and up on Linux), where no client connection of the machine can
# hold them while the server starts.
if [ "$PGMAJOR" = 15 ]; then
	pg_port=25329 ch_port=18123
else
	pg_port=$((25300 + PGMAJOR)) ch_port=$((18100 + 2 * (PGMAJOR - 10)))
fi
PGPORT_=${DPWIN_PGPORT:-$pg_port}
CHPORT=${DPWIN_CH_PORT:-$ch_port}
CHCPORT=${DPWIN_CH_CONTROL_PORT:-$((ch_port + 1))}
PGDB=dpwin_test
PGUSER_=postgres
CHUSER=dpwin
CHREFRESHUSER=dpwin_refresh
BUILD=$SB/build

log() { printf 'sandbox: %s\n' "$*" >&2; }

# What the machine needs whatever the major: the psql the tests and these
# scripts use, the endpoint's build, the TAP suite's tools.  PostgreSQL 15
# itself comes from the machine's Debian, the later majors from a chroot
# (test/pg/chroot.sh installs debootstrap for it).
host_packages="postgresql-client-15 libmicrohttpd-dev libipc-run-perl curl make gcc pkg-config openssl socat"
[ -n "$PG_SUITE" ] || host_packages="$host_packages $PG_PACKAGES libcurl4-openssl-dev libssl-dev"

install_deps() {
	local missing=()
	for p in $host_packages; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing Debian packages: ${missing[*]}"
		host_apt_get update -qq
		host_apt_get install -y -qq "${missing[@]}" >/dev/null
	fi
	if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
		log "installing nodejs and npm"
		host_apt_get install -y -qq nodejs npm >/dev/null
	fi
	"$ROOT/test/install-engine.sh" >"$SB/engine_path"
	[ -z "$PGCHROOT" ] || "$ROOT/test/pg/chroot.sh" ensure "$PGMAJOR" >/dev/null
}

# The private installation of 15: a copy of Debian's, refreshed when the
# package changes (its pg_config is compared with the system's).
make_pgroot() {
	local sys=/usr/lib/postgresql/$PGMAJOR
	if [ -x "$PG_CONFIG_" ] && [ "$("$PG_CONFIG_" --version)" = "$("$sys/bin/pg_config" --version)" ] &&
		[ -f "$PGROOT/usr/lib/postgresql/$PGMAJOR/lib/pg_cron.so" ]; then
		return 0
	fi
	log "making the sandbox's private PostgreSQL $PGMAJOR installation"
	rm -rf "$PGROOT"
	mkdir -p "$PGROOT/usr/lib/postgresql" "$PGROOT/usr/share/postgresql" "$PGROOT/usr/include/postgresql"
	cp -a "$sys" "$PGROOT/usr/lib/postgresql/"
	cp -a "/usr/share/postgresql/$PGMAJOR" "$PGROOT/usr/share/postgresql/"
	ln -s "/usr/include/postgresql/$PGMAJOR" "$PGROOT/usr/include/postgresql/$PGMAJOR"
}

# What of the machine a chroot's server sees, at the same paths: the
# sandbox folder, and the temporary folder, where the tests put files that
# they name to the server (a ca_file, say), as they would on one machine.
pg_binds=(--bind "$SB" --bind /tmp)
if [ -n "${TMPDIR:-}" ] && [ -d "$TMPDIR" ] && [ "$TMPDIR" != /tmp ]; then pg_binds+=(--bind "$TMPDIR"); fi

# in_pg COMMAND...: run COMMAND as root where PostgreSQL runs.
in_pg() {
	if [ -n "$PGCHROOT" ]; then
		"$ROOT/test/pg/chroot.sh" run "$PGMAJOR" "${pg_binds[@]}" -- "$@"
	else
		"$@"
	fi
}

as_pg() {
	# initdb and the postmaster refuse to run as root
	if [ -n "$PGCHROOT" ]; then
		"$ROOT/test/pg/chroot.sh" run "$PGMAJOR" --user postgres "${pg_binds[@]}" -- /bin/bash -c "$*"
	elif [ "$(id -u)" = 0 ]; then
		su postgres -s /bin/bash -c "$*"
	else
		bash -c "$*"
	fi
}

# The work tree's sources, copied into the sandbox's build folder, so that
# sandboxes of different majors never share object files.
copy_sources() {
	local excludes=(--exclude=./.git --exclude=./test/.pg --exclude='./test/.sandbox*'
		--exclude=./test/.engine --exclude=./test/bench/out --exclude=node_modules
		--exclude='*.o' --exclude='*.so' --exclude='*.bc' --exclude=./results
		--exclude=./output_iso --exclude=./log --exclude=./tmp_check
		--exclude='./regression.*' --exclude='./dpwin--*.sql')
	case "$SB" in "$ROOT"/*) excludes+=(--exclude="./${SB#"$ROOT"/}") ;; esac
	rm -rf "$BUILD"
	mkdir -p "$BUILD"
	tar -C "$ROOT" -c "${excludes[@]}" . | tar -C "$BUILD" -x
}

build() {
	log "building dpwin for PostgreSQL $PGMAJOR"
	[ -n "$PGCHROOT" ] || make_pgroot
	copy_sources
	in_pg make -C "$BUILD" -s -j2 PG_CONFIG="$PG_CONFIG_" >/dev/null
	in_pg make -C "$BUILD" -s PG_CONFIG="$PG_CONFIG_" install >/dev/null
	# test-only SQL access to dpwin's internals: the sandbox's, never the product's
	in_pg make -C "$BUILD/test/modules/dpwin_test" -s PG_CONFIG="$PG_CONFIG_" install >/dev/null
	# one build at a time: the sandboxes of several majors may start side by side
	flock /var/lock/dpwin-chendpoint.lock make -C "$ROOT/test/chendpoint" -s >/dev/null
}

pg_running() {
	[ -f "$SB/pg/postmaster.pid" ] && kill -0 "$(head -1 "$SB/pg/postmaster.pid")" 2>/dev/null
}

ch_running() {
	[ -f "$SB/ch.pid" ] && kill -0 "$(cat "$SB/ch.pid")" 2>/dev/null
}

init_pg() {
	[ -f "$SB/pg/PG_VERSION" ] && return 0
	log "creating PostgreSQL $PGMAJOR cluster"
	mkdir -p "$SB/pg" "$SB/run"
	# by name: the postgres user of a chroot may have other ids than the machine's
	if [ "$(id -u)" = 0 ]; then in_pg chown postgres:postgres "$SB/pg" "$SB/run"; fi
	as_pg "$PGBIN/initdb -D '$SB/pg' -U $PGUSER_ -A trust -E UTF8 --locale=C.UTF-8 >/dev/null"
	local preload="dpwin" cron=""
	if [ "$PG_CRON" = 1 ]; then
		preload="dpwin, pg_cron"
		cron="cron.database_name = '$PGDB'"
	fi
	cat >>"$SB/pg/postgresql.conf" <<EOF
# dpwin sandbox
listen_addresses = '127.0.0.1'
port = $PGPORT_
unix_socket_directories = '$SB/run'
shared_preload_libraries = '$preload'
$cron
max_worker_processes = 96
max_connections = 120
fsync = off
synchronous_commit = off
full_page_writes = off
logging_collector = off
log_line_prefix = '%m [%p] %q%u@%d '
log_min_messages = info
dpwin.max_workers = 16
EOF
}

# A port given in the kernel's range of ephemeral ports may, for a
# moment, be held by a client connection of the machine, and the
# postmaster exits ("Address already in use").  It is started again then,
# up to three times; any other failure shows the log's last lines.
start_pg() {
	local try mark
	if pg_running; then
		log "PostgreSQL already running"
	else
		for try in 1 2 3; do
			mark=$({ wc -c <"$SB/run/postgresql.log"; } 2>/dev/null || echo 0)
			as_pg "$PGBIN/pg_ctl -D '$SB/pg' -l '$SB/run/postgresql.log' -w -t 60 start >/dev/null" && break
			tail -c +$((mark + 1)) "$SB/run/postgresql.log" 2>/dev/null | tail -5 >&2 || true
			if [ "$try" = 3 ] ||
				! tail -c +$((mark + 1)) "$SB/run/postgresql.log" 2>/dev/null | grep -q 'Address already in use'; then
				return 1
			fi
			log "port $PGPORT_ is in use for a moment: starting PostgreSQL again"
			sleep 1
		done
	fi
	psql -X -h "$SB/run" -p "$PGPORT_" -U $PGUSER_ -d postgres -qAtc \
		"SELECT 1 FROM pg_database WHERE datname = '$PGDB'" | grep -q 1 ||
		psql -X -h "$SB/run" -p "$PGPORT_" -U $PGUSER_ -d postgres -qc "CREATE DATABASE $PGDB"
	local cron=""
	[ "$PG_CRON" = 1 ] && cron="CREATE EXTENSION IF NOT EXISTS pg_cron;"
	psql -X -h "$SB/run" -p "$PGPORT_" -U $PGUSER_ -d $PGDB -qc \
		"$cron CREATE EXTENSION IF NOT EXISTS dpwin;
		 CREATE EXTENSION IF NOT EXISTS dpwin_test" >/dev/null
}

# The foreign server `sandbox_ch` for the endpoint, with a user mapping for
# the sandbox's superuser only (a PUBLIC mapping would show the password to
# every role with USAGE on the server).  It maps to the least-privileged
# account, `dpwin_refresh` (test/ch_config.sh): the grants
# docs/admission.md lists, so every refresh of the suite runs with them.
# `sandbox_ch_admin` maps to the admin account, for what the tests prepare
# in ClickHouse through SQL (databases, tables, rows: the isolation specs).
create_server() {
	create_server_as sandbox_ch "$CHREFRESHUSER"
	create_server_as sandbox_ch_admin "$CHUSER"
}

# create_server_as NAME CHUSER: the server NAME for the endpoint, mapped to
# the ClickHouse account CHUSER, unless it exists.
create_server_as() {
	psql -h "$SB/run" -p "$PGPORT_" -U $PGUSER_ -d $PGDB -q -v ON_ERROR_STOP=1 \
		-v url="http://127.0.0.1:$CHPORT" -v name="$1" -v chuser="$2" \
		-v chpassword="$(cat "$SB/ch_password")" >/dev/null <<'SQL'
SELECT NOT EXISTS (SELECT 1 FROM pg_foreign_server WHERE srvname = :'name') AS create_it \gset
\if :create_it
CREATE SERVER :"name" FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url :'url');
CREATE USER MAPPING FOR CURRENT_USER SERVER :"name"
	OPTIONS (user :'chuser', password :'chpassword');
\endif
SQL
}

# The endpoint's server configuration (users, row policies): test/ch_config.sh.
. "$ROOT/test/ch_config.sh"

start_ch() {
	if ch_running; then
		log "ClickHouse endpoint already running"
		return 0
	fi
	mkdir -p "$SB/ch"
	[ -f "$SB/ch_password" ] || head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$SB/ch_password"
	chmod 600 "$SB/ch_password"
	write_ch_config
	local lib
	lib=$(cat "$SB/engine_path")
	nohup "$ROOT/test/chendpoint/chendpoint" --lib "$lib" --path "$SB/ch" \
		--config-file "$SB/ch_config.xml" \
		--listen "127.0.0.1:$CHPORT" --control "127.0.0.1:$CHCPORT" \
		--user "$CHUSER" --password "$(cat "$SB/ch_password")" \
		--log "$SB/ch_queries.log" >>"$SB/ch.log" 2>&1 &
	echo $! >"$SB/ch.pid"
	for _ in $(seq 1 300); do
		if curl -fsS "http://127.0.0.1:$CHPORT/ping" >/dev/null 2>&1; then
			return 0
		fi
		ch_running || { tail -20 "$SB/ch.log" >&2; log "ClickHouse endpoint died"; exit 1; }
		sleep 0.2
	done
	log "ClickHouse endpoint did not answer /ping"
	exit 1
}

stop_pg() {
	pg_running && as_pg "$PGBIN/pg_ctl -D '$SB/pg' -m fast -w stop >/dev/null" || true
}

stop_ch() {
	if ch_running; then
		local pid
		pid=$(cat "$SB/ch.pid")
		kill -TERM "$pid"
		for _ in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
	fi
	rm -f "$SB/ch.pid"
}

print_env() {
	cat <<EOF
export PGHOST='$SB/run'
export PGPORT='$PGPORT_'
export PGDATABASE='$PGDB'
export PGUSER='$PGUSER_'
export DPWIN_CH_URL='http://127.0.0.1:$CHPORT'
export DPWIN_CH_USER='$CHUSER'
export DPWIN_CH_REFRESH_USER='$CHREFRESHUSER'
export DPWIN_CH_PASSWORD='$(cat "$SB/ch_password" 2>/dev/null)'
export DPWIN_CH_CONTROL_URL='http://127.0.0.1:$CHCPORT'
export DPWIN_SANDBOX='$SB'
export DPWIN_PGDATA='$SB/pg'
export DPWIN_PGBIN='$PGBIN'
export PG_CONFIG='$PG_CONFIG_'
export DPWIN_PG='$PGMAJOR'
export DPWIN_PG_CHROOT='$PGCHROOT'
export DPWIN_SANDBOX_DIR='$SB'
EOF
}

case "${1:-}" in
	start)
		mkdir -p "$SB"
		echo "$PGMAJOR" >"$SB/pg_major"
		install_deps
		build
		init_pg
		start_pg
		start_ch
		create_server
		print_env >"$SB/env"
		log "up: PostgreSQL on port $PGPORT_, ClickHouse endpoint on port $CHPORT"
		;;
	stop)
		stop_pg
		stop_ch
		;;
	restart-pg)
		pg_running && as_pg "$PGBIN/pg_ctl -D '$SB/pg' -m immediate -w stop >/dev/null" || true
		start_pg
		;;
	restart-ch)
		stop_ch
		start_ch
		;;
	stop-ch)
		stop_ch
		;;
	start-ch)
		start_ch
		;;
	env)
		print_env
		;;
	status)
		pg_running && echo "postgresql: running" || echo "postgresql: stopped"
		ch_running && echo "clickhouse: running" || echo "clickhouse: stopped"
		;;
	pg-exec)
		[ $# -eq 2 ] || { echo "usage: $0 pg-exec 'shell command'" >&2; exit 2; }
		as_pg "$2"
		;;
	make)
		shift
		eval "$(print_env)"
		in_pg make -C "$BUILD" PG_CONFIG="$PG_CONFIG_" "$@"
		;;
	*)
		echo "usage: $0 start|stop|restart-pg|restart-ch|stop-ch|start-ch|env|status|pg-exec CMD|make ARG..." >&2
		exit 2
		;;
esac
