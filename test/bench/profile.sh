#!/usr/bin/env bash
#
# test/bench/profile.sh — where a refresh's extraction spends its CPU.
#
# Needs the benchmark's sandbox running with its dataset (run
# `BENCH_KEEP_SANDBOX=1 test/bench/run.sh` once, or a quick run).  Clones
# the day-partitioned 30-day base into a scratch target, runs
# PROFILE_RUNS [5] refreshes of a 7-day window at parallelism
# PROFILE_PARALLELISM [2] while perf (linux-perf, installed when missing)
# samples every process of the sandbox's PostgreSQL and the ClickHouse
# endpoint, and prints:
#   - the wall and phase times of every refresh (stage_seconds is the
#     extraction),
#   - where the chunk workers spend their CPU, by function (self time),
#   - where the endpoint spends its CPU, by function,
#   - how the CPU of the whole run splits between chunk workers, the
#     coordinator, the endpoint and the rest.
# perf's data and full reports stay in test/bench/out/prof.
#
#   PROFILE_ROWS_PER_DAY, PROFILE_SOURCE_DAYS  the dataset to use
#     (default: the benchmark's defaults, 100000 and 70)
#   PROFILE_SKIP_DAYS=N  profile `skip_unchanged` refreshes instead: the
#     route reads a copy of the source's last N days with an N-day
#     lookback and 1-day chunks, and before each refresh one day of it
#     changes (as the benchmark's skip variant), so each refresh digests
#     N days and stages one [0: refreshes of a 7-day window]
#   PROFILE_CALLGRAPH=fp|dwarf|none  call graphs [fp: enough for the
#     kernel's stacks, which tell page faults from network; Debian builds
#     PostgreSQL without frame pointers, dwarf unwinds it too, at a cost]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${BENCH_OUT:-$ROOT/test/bench/out}
export DPWIN_SANDBOX_DIR=${DPWIN_SANDBOX_DIR:-$OUT/sb}
RUNS=${PROFILE_RUNS:-5}
PAR=${PROFILE_PARALLELISM:-2}
TAG="r${PROFILE_ROWS_PER_DAY:-100000}_d${PROFILE_SOURCE_DAYS:-70}"
DB=bench_$TAG
P=$OUT/prof
log() { printf 'profile: %s\n' "$*" >&2; }

[ -f "$DPWIN_SANDBOX_DIR/env" ] || { log "no benchmark sandbox in $DPWIN_SANDBOX_DIR"; exit 1; }
# shellcheck disable=SC1091
. "$DPWIN_SANDBOX_DIR/env"
export DPWIN_PGPORT=$PGPORT DPWIN_CH_PORT=${DPWIN_CH_URL##*:} DPWIN_CH_CONTROL_PORT=${DPWIN_CH_CONTROL_URL##*:}
if ! command -v perf >/dev/null 2>&1; then
	log "installing linux-perf"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null
fi
mkdir -p "$P"
# A PostgreSQL that was already running keeps the dpwin.so it loaded when
# it started (shared_preload_libraries), even after `make install` replaced
# the file: restart it, so that the code measured is the code just built.
pm=$(head -1 "$DPWIN_SANDBOX_DIR/pg/postmaster.pid")
if grep -q 'dpwin\.so (deleted)' "/proc/$pm/maps" 2>/dev/null; then
	log "restarting PostgreSQL: it runs an older dpwin.so than the one installed"
	"$ROOT/test/sandbox.sh" restart-pg
fi

# shellcheck source=test/bench/lib.sh
. "$ROOT/test/bench/lib.sh"

[ "$(ch "SELECT count() FROM system.tables WHERE database = '$DB' AND name = 'base_day_30'")" = 1 ] ||
	{ log "no $DB.base_day_30: run the benchmark first"; exit 1; }
end=$(pgq "SELECT to_char(max(w)::date + 1, 'YYYY-MM-DD') FROM bench_$TAG.events")

SKIP=${PROFILE_SKIP_DAYS:-0}
src=bench_$TAG.events
lookback=7
if [ "$SKIP" -gt 0 ]; then
	src=bench_$TAG.events_prof
	lookback=$SKIP
	pgq "DROP TABLE IF EXISTS $src;
		CREATE TABLE $src (LIKE bench_$TAG.events INCLUDING ALL);
		INSERT INTO $src SELECT * FROM bench_$TAG.events WHERE w >= timestamptz '$end 00:00:00+00' - interval '$SKIP days'" >/dev/null
	pgq "VACUUM ANALYZE $src" >/dev/null
fi
# change_day I: before refresh I of a skip profile, one day of the source changes
change_day() {
	[ "$SKIP" -gt 0 ] || return 0
	pgq "UPDATE $src SET qty = coalesce(qty, 0) + 1
		WHERE w >= timestamptz '$end 00:00:00+00' - interval '1 day' * (1 + ($1 * 7 + 3) % $SKIP)
		  AND w < timestamptz '$end 00:00:00+00' - interval '1 day' * (($1 * 7 + 3) % $SKIP)" >/dev/null
}

clone_base t_prof base_day_30
pgq "SELECT dpwin.drop_route('prof') FROM dpwin.route WHERE route_name = 'prof';
	SELECT dpwin.create_route('prof', '$src', 'w', 'sandbox_ch', '$DB', 't_prof',
		interval '$lookback days', interval '1 day', parallelism => $PAR)" >/dev/null
[ "$SKIP" -gt 0 ] && pgq "SELECT dpwin.alter_route('prof', skip_unchanged => true)" >/dev/null
# one unmeasured refresh: caches warm, as in the benchmark
pgq "SELECT state FROM dpwin_refresh('prof', '$end 00:00:00+00')" >/dev/null
drop_backups
settle

postmaster=$(head -1 "$DPWIN_PGDATA/postmaster.pid")
endpoint=$(cat "$DPWIN_SANDBOX_DIR/ch.pid")
cg=()
[ "${PROFILE_CALLGRAPH:-fp}" != none ] && cg=(--call-graph "${PROFILE_CALLGRAPH:-fp}")
# -p follows the processes the postmaster forks from now on (inherit).
perf record -q -F 499 "${cg[@]}" -p "$postmaster" -o "$P/pg.data" 2>"$P/pg.record.log" &
perf_pg=$!
perf record -q -F 499 "${cg[@]}" -p "$endpoint" -o "$P/ch.data" 2>"$P/ch.record.log" &
perf_ch=$!
sleep 1

# The chunk workers' and coordinators' pids, from their titles.
: >"$P/roles"
(
	while kill -0 $perf_pg 2>/dev/null; do
		for c in $(cat "/proc/$postmaster/task/$postmaster/children" 2>/dev/null); do
			t=$( (tr "\\0" " " <"/proc/$c/cmdline") 2>/dev/null || true)
			case "$t" in
			*"dpwin chunk worker"*) echo "worker $c" ;;
			*"dpwin coordinator"*) echo "coordinator $c" ;;
			esac
		done >>"$P/roles"
		sleep 0.02
	done
) &
watcher=$!

: >"$P/runs"
for i in $(seq 1 "$RUNS"); do
	change_day "$i"
	t0=$(date +%s.%N)
	pgq "SELECT details->'evidence'->'phases' FROM dpwin_refresh('prof', '$end 00:00:00+00')" >>"$P/runs"
	t1=$(date +%s.%N)
	echo "wall $(echo "$t1 - $t0" | bc)" >>"$P/runs"
	drop_backups
	settle
done
kill -INT $perf_pg $perf_ch
wait $perf_pg $perf_ch 2>/dev/null || true
wait $watcher 2>/dev/null || true
ch "DROP TABLE IF EXISTS $DB.t_prof SYNC"
pgq "SELECT dpwin.drop_route('prof')" >/dev/null
[ "$SKIP" -gt 0 ] && pgq "DROP TABLE $src" >/dev/null

workers=$(awk '$1 == "worker" {print $2}' "$P/roles" | sort -u | paste -sd,)
coords=$(awk '$1 == "coordinator" {print $2}' "$P/roles" | sort -u | paste -sd,)
echo "== refreshes (phases in seconds; wall from psql)"
grep -o '"[a-z_]*_seconds": [0-9.]*\|^wall [0-9.]*' "$P/runs" | paste -sd' ' | sed 's/wall/\nwall/g; s/"//g'
echo
perf report -i "$P/pg.data" --no-children --sort comm,pid -q -g none 2>/dev/null >"$P/pg.bypid.txt" || true
perf report -i "$P/pg.data" --no-children --pid "$workers" --sort dso,sym -q -g none 2>/dev/null >"$P/workers.txt"
perf report -i "$P/pg.data" --no-children --pid "$coords" --sort dso,sym -q -g none 2>/dev/null >"$P/coordinator.txt" || true
perf report -i "$P/ch.data" --no-children --sort dso,sym -q -g none 2>/dev/null >"$P/endpoint.txt"
perf report -i "$P/ch.data" --no-children --sort comm -q -g none 2>/dev/null >"$P/endpoint.threads.txt"
# CPU samples per role: every sample is 1/499 s of one CPU.
perf script -i "$P/pg.data" -F pid 2>/dev/null | awk -v w=",$workers," -v c=",$coords," '
	{ if (index(w, "," $1 ",")) nw++; else if (index(c, "," $1 ",")) nc++; else no++ }
	END { printf "chunk workers %.2f s, coordinators %.2f s, other PostgreSQL processes %.2f s, ", nw/499, nc/499, no/499 }' >"$P/split"
perf script -i "$P/ch.data" -F tid 2>/dev/null | awk '{ n++ } END { printf "endpoint %.2f s\n", n/499 }' >>"$P/split"
echo "== CPU time over the $RUNS refreshes: $(cat "$P/split")"
echo
echo "== chunk workers, CPU by kind of work (self time; kernel time by its call chain)"
perf script -i "$P/pg.data" -F pid,ip,sym,dso 2>/dev/null | perl "$ROOT/test/bench/profile-classify.pl" "$workers"
echo
echo "== chunk workers, self time by function (top 30)"
head -30 "$P/workers.txt"
echo
echo "== endpoint, self time by function (top 30)"
head -30 "$P/endpoint.txt"
echo
echo "== endpoint threads"
head -15 "$P/endpoint.threads.txt"
