#!/usr/bin/env bash
#
# test/pg/upgrade.sh — pg_upgrade of a cluster with dpwin from PostgreSQL 18
# to 19, both of Debian's packages in the 19 chroot (test/pg/majors.sh),
# with routes, a journal, evidence, leases and a verification present; then
# the new cluster refreshes, verifies and recovers, and the target holds
# exactly the source rows.
#
# It uses the ClickHouse endpoint of a running sandbox (test/sandbox.sh
# start, of any major; DPWIN_SANDBOX_DIR and the ports as for the sandbox),
# and clusters of its own under that sandbox's folder.  Prints "ok N - ..."
# per check and exits non-zero at the first failure.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OLD=18
NEW=19
eval "$(test/sandbox.sh env)"
WORK=$DPWIN_SANDBOX/upgrade
OLDPORT=$((PGPORT + 50))
NEWPORT=$((PGPORT + 51))
CHDB=upgrade_$$
n=0

log() { printf 'upgrade: %s\n' "$*" >&2; }
ok() { n=$((n + 1)); printf 'ok %d - %s\n' "$n" "$*"; }
fail() { n=$((n + 1)); printf 'not ok %d - %s\n' "$n" "$*"; exit 1; }
check() { # check DESCRIPTION GOT EXPECTED
	if [ "$2" = "$3" ]; then ok "$1"; else fail "$1: got '$2', expected '$3'"; fi
}

in_chroot() { test/pg/chroot.sh run "$NEW" --bind "$WORK" -- "$@"; }
as_pg() { test/pg/chroot.sh run "$NEW" --user postgres --bind "$WORK" -- /bin/bash -c "$*"; }
pg() { # pg PORT SQL: psql against one of the two clusters
	psql -X -q -A -t -v ON_ERROR_STOP=1 -h "$WORK/run" -p "$1" -U postgres -d app -c "$2"
}
ch() {
	curl -sS --fail-with-body -u "$DPWIN_CH_USER:$DPWIN_CH_PASSWORD" "$DPWIN_CH_URL/" --data-binary "$1"
}
stop_all() {
	for d in old new; do
		[ -f "$WORK/$d/postmaster.pid" ] || continue
		as_pg "/usr/lib/postgresql/\$(cat $WORK/$d/PG_VERSION)/bin/pg_ctl -D $WORK/$d -m fast -w stop" >/dev/null 2>&1 || true
	done
}
trap stop_all EXIT

started=$(date +%s)
test/pg/chroot.sh ensure "$NEW" >/dev/null
stop_all
rm -rf "$WORK"
mkdir -p "$WORK/run"

# dpwin built and installed for both majors in the chroot, from this tree
for v in $OLD $NEW; do
	log "building dpwin for PostgreSQL $v"
	mkdir -p "$WORK/src-$v"
	git ls-files -z | xargs -0 tar -c | tar -C "$WORK/src-$v" -x
	in_chroot make -C "$WORK/src-$v" -s -j2 with_llvm=no PG_CONFIG=/usr/lib/postgresql/$v/bin/pg_config >/dev/null
	in_chroot make -C "$WORK/src-$v" -s with_llvm=no PG_CONFIG=/usr/lib/postgresql/$v/bin/pg_config install >/dev/null
done
# by name: the postgres user of the chroot may have other ids than the machine's
in_chroot chown -R postgres:postgres "$WORK"

initdb() { # initdb MAJOR DIR PORT
	as_pg "/usr/lib/postgresql/$1/bin/initdb -D $WORK/$2 -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null"
	cat >>"$WORK/$2/postgresql.conf" <<-EOF
		port = $3
		listen_addresses = ''
		unix_socket_directories = '$WORK/run'
		shared_preload_libraries = 'dpwin'
		max_worker_processes = 16
	EOF
}
start() { as_pg "/usr/lib/postgresql/$1/bin/pg_ctl -D $WORK/$2 -l $WORK/$2.log -w -t 60 start >/dev/null"; }

# --- 18, with dpwin and rows ------------------------------------------------

initdb $OLD old $OLDPORT
start $OLD old
psql -X -q -h "$WORK/run" -p $OLDPORT -U postgres -d postgres -c "CREATE DATABASE app"
ch "DROP DATABASE IF EXISTS $CHDB"
ch "CREATE DATABASE $CHDB ENGINE = Atomic"
ch "CREATE TABLE $CHDB.ev (id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String)) ENGINE = MergeTree ORDER BY id"
pg $OLDPORT "
CREATE EXTENSION dpwin;
CREATE ROLE app_owner LOGIN;
GRANT dpwin_operator TO app_owner;
CREATE SERVER ch FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url '$DPWIN_CH_URL');
CREATE USER MAPPING FOR PUBLIC SERVER ch
	OPTIONS (user '$DPWIN_CH_REFRESH_USER', password '$DPWIN_CH_PASSWORD');
GRANT USAGE ON FOREIGN SERVER ch TO app_owner;
CREATE TABLE public.src (id bigint NOT NULL, w timestamptz, v text);
INSERT INTO public.src
	SELECT g, timestamptz '2026-09-07 00:00:00+00' + g * interval '7 minutes 13 seconds', 'v' || (g % 11)
	FROM generate_series(0, 999) g;
INSERT INTO public.src VALUES (5000, '2026-09-08 12:00:00+00', 'dup'), (5000, '2026-09-08 12:00:00+00', 'dup');
GRANT SELECT ON public.src TO app_owner;
CREATE TABLE public.ev_log (invocation uuid, metrics jsonb);
CREATE FUNCTION public.ev(inv uuid, metrics jsonb) RETURNS void LANGUAGE sql
	AS 'INSERT INTO public.ev_log VALUES (inv, metrics)';
GRANT INSERT ON public.ev_log TO app_owner;
SET ROLE app_owner;
SELECT dpwin.create_route('r', 'public.src', 'w', 'ch', '$CHDB', 'ev', interval '1 day', interval '6 hours',
	parallelism => 2, evidence_function => 'public.ev(uuid, jsonb)');
" >/dev/null
check "$OLD: refresh" "$(pg $OLDPORT "SET ROLE app_owner; SELECT state FROM dpwin_refresh('r', '2026-09-09 00:00:00+00')")" completed
check "$OLD: verify" "$(pg $OLDPORT "SET ROLE app_owner; SELECT bool_and(matches) FROM dpwin.verify('r', '2026-09-09 00:00:00+00')")" t
inv1=$(pg $OLDPORT "SELECT invocation_id FROM dpwin.invocation")

ROWS_SQL="SELECT string_agg(t || ':' || n, ' ' ORDER BY t) FROM (
	SELECT 'route' t, count(*) n FROM dpwin.route UNION ALL SELECT 'lease', count(*) FROM dpwin.lease
	UNION ALL SELECT 'invocation', count(*) FROM dpwin.invocation UNION ALL SELECT 'chunk', count(*) FROM dpwin.chunk
	UNION ALL SELECT 'publication', count(*) FROM dpwin.publication UNION ALL SELECT 'evidence', count(*) FROM dpwin.evidence
	UNION ALL SELECT 'route_state', count(*) FROM dpwin.route_state
	UNION ALL SELECT 'verification', count(*) FROM dpwin.verification) s"
DIGEST_SQL="SELECT md5(string_agg(x, E'\n' ORDER BY x)) FROM (
	SELECT to_jsonb(r)::text x FROM dpwin.route r UNION ALL SELECT to_jsonb(l)::text FROM dpwin.lease l
	UNION ALL SELECT to_jsonb(i)::text FROM dpwin.invocation i UNION ALL SELECT to_jsonb(c)::text FROM dpwin.chunk c
	UNION ALL SELECT to_jsonb(p)::text FROM dpwin.publication p UNION ALL SELECT to_jsonb(e)::text FROM dpwin.evidence e
	UNION ALL SELECT to_jsonb(s)::text FROM dpwin.route_state s UNION ALL SELECT to_jsonb(v)::text FROM dpwin.verification v) s"
rows_before=$(pg $OLDPORT "$ROWS_SQL")
digest_before=$(pg $OLDPORT "$DIGEST_SQL")
log "rows on $OLD: $rows_before"
as_pg "/usr/lib/postgresql/$OLD/bin/pg_ctl -D $WORK/old -m fast -w stop >/dev/null"

# --- pg_upgrade ------------------------------------------------------------

initdb $NEW new $NEWPORT
log "pg_upgrade $OLD -> $NEW"
t0=$(date +%s)
if ! as_pg "cd $WORK && /usr/lib/postgresql/$NEW/bin/pg_upgrade -b /usr/lib/postgresql/$OLD/bin -B /usr/lib/postgresql/$NEW/bin \
	-d $WORK/old -D $WORK/new -p $OLDPORT -P $NEWPORT -U postgres --socketdir $WORK/run" >"$WORK/pg_upgrade.out" 2>&1; then
	tail -30 "$WORK/pg_upgrade.out"
	fail "pg_upgrade $OLD -> $NEW"
fi
ok "pg_upgrade $OLD -> $NEW with dpwin installed ($(($(date +%s) - t0)) s)"
start $NEW new

# --- 19: everything kept, and it works ---------------------------------------

check "$NEW: extension version" "$(pg $NEWPORT "SELECT extversion FROM pg_extension WHERE extname = 'dpwin'")" \
	"$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" dpwin.control)"
check "$NEW: every dpwin table keeps its rows ($rows_before)" "$(pg $NEWPORT "$ROWS_SQL")" "$rows_before"
check "$NEW: the rows are identical (digest of every row)" "$(pg $NEWPORT "$DIGEST_SQL")" "$digest_before"
check "$NEW: route source and owner" "$(pg $NEWPORT "SELECT source_relid || ' ' || owner FROM dpwin.route")" \
	"src app_owner"
check "$NEW: refresh of the next window" \
	"$(pg $NEWPORT "SET ROLE app_owner; SELECT state FROM dpwin_refresh('r', '2026-09-10 00:00:00+00')")" completed
src=$(pg $NEWPORT "SELECT id || '|' || (extract(epoch FROM w) * 1000000)::bigint || '|' || v FROM public.src
	WHERE w >= '2026-09-08 00:00:00+00' AND w < '2026-09-10 00:00:00+00'" | sort | md5sum)
tgt=$(ch "SELECT concat(toString(id), '|', toString(toUnixTimestamp64Micro(w)), '|', v) FROM $CHDB.ev FORMAT TSVRaw" |
	sort | md5sum)
check "$NEW: the target holds exactly the source rows of both windows" "$tgt" "$src"
check "$NEW: the evidence function ran for both refreshes" "$(pg $NEWPORT "SELECT count(*) FROM public.ev_log")" 2
check "$NEW: verify" "$(pg $NEWPORT "SET ROLE app_owner; SELECT bool_and(matches) FROM dpwin.verify('r', '2026-09-10 00:00:00+00')")" t
check "$NEW: recover an invocation of $OLD" "$(pg $NEWPORT "SET ROLE app_owner; SELECT state FROM dpwin.recover('$inv1')")" completed

stop_all
ch "DROP DATABASE IF EXISTS $CHDB"
rm -rf "$WORK"
printf '1..%d\n# pg_upgrade %s -> %s: all ok in %d s\n' "$n" "$OLD" "$NEW" "$(($(date +%s) - started))"
