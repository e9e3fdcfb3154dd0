#!/usr/bin/env bash
#
# test/bench/run.sh — the dpwin benchmark (docs/benchmark.md).
#
# Starts a sandbox of its own (test/bench/out/sb, PostgreSQL port 25990,
# ClickHouse endpoint ports 18990/18991) unless one is already running
# there, generates the dataset (or reuses it), runs every variant in
# interleaved rounds, checks every result, prints the table, writes
# test/bench/out/results.csv and results.txt (and docs/bench/results.csv
# when every parameter is at its default), and stops the sandbox it
# started.  Not part of CI.
#
# Parameters (environment; defaults in brackets; docs/benchmark.md):
#   BENCH_ROWS_PER_DAY [100000; a list, e.g. "1000 100000", is a dimension:
#     the window's size, one dataset each]  BENCH_SOURCE_DAYS [70]
#   BENCH_WINDOW_DAYS [7]  BENCH_SIZES ["30 300"; days, so daily partitions,
#     of the targets, e.g. "30 1000": the target's size]
#   BENCH_SHAPES ["day month flat"]
#   BENCH_ENDS ["00:00 13:37"]  BENCH_PARALLELISM [2]  BENCH_ROUNDS [3]
#   BENCH_MEMORY_WINDOW_DAYS [10 x window]  BENCH_SKIP_DAYS [30]
#   BENCH_SKIP_CHANGED [rotate; or newest]: the skip variant's changed day
#   BENCH_ONLY [all: dpwin,naive,expert,copy,sink,memory,skip,backfill]
#   BENCH_BACKFILL_WINDOWS [10]: the backfill variants' windows of the
#     lookback, ending at the source's last midnight, on the largest
#     day-partitioned target; BENCH_BACKFILL_SINGLES [1]: 0 leaves out
#     "backfill singles"
#   BENCH_HOSTS ["shared"; or "split", or both]: split pins PostgreSQL to
#   CPU 0 and the endpoint to CPU 1, as on two hosts
#   BENCH_RTT_MS ["direct"; or round trips in ms, e.g. "0 2 20"]: every
#   connection between the two sides crosses test/bench/netdelay
#   BENCH_AGAIN [1]: 0 leaves out "dpwin again"
#   BENCH_OUT [test/bench/out]  BENCH_CSV [see above]
#   BENCH_SHARED_BUFFERS [the sandbox's: 128MB]: PostgreSQL's
#     shared_buffers for the run, for every variant alike (set with ALTER
#     SYSTEM and a restart; a run without it resets it)
#   BENCH_KEEP_SANDBOX=1 leaves the sandbox running (the dataset is reused
#   by the next run either way: it lives in the sandbox's folder).
#   DPWIN_SANDBOX_DIR, DPWIN_PGPORT, DPWIN_CH_PORT, DPWIN_CH_CONTROL_PORT
#   choose another sandbox.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export BENCH_OUT=${BENCH_OUT:-$ROOT/test/bench/out}
export DPWIN_SANDBOX_DIR=${DPWIN_SANDBOX_DIR:-$BENCH_OUT/sb}
export DPWIN_PGPORT=${DPWIN_PGPORT:-25990}
export DPWIN_CH_PORT=${DPWIN_CH_PORT:-18990}
export DPWIN_CH_CONTROL_PORT=${DPWIN_CH_CONTROL_PORT:-18991}

log() { printf 'bench: %s\n' "$*" >&2; }

mkdir -p "$BENCH_OUT"
started=0
if "$ROOT/test/sandbox.sh" status | grep -q stopped; then
	started=1
fi
# The benchmark drops its own tables with SYNC, but the tables dpwin drops
# itself (staging tables, generations of failed runs) wait in the engine's
# trash for 8 minutes, as Atomic databases delay the removal.  Once the
# endpoint is down, finish that removal here, as the engine would.
reclaim_dropped() {
	local ch="$DPWIN_SANDBOX_DIR/ch" f u
	for f in "$ch"/metadata_dropped/*.sql; do
		[ -e "$f" ] || continue
		u=$(basename "$f" .sql)
		u=${u##*.}
		[[ "$u" =~ ^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$ ]] || continue
		rm -rf "${ch:?}/store/${u:0:3}/$u"
		rm -f "$f"
	done
}
stop_sandbox() {
	if [ "$started" = 1 ] && [ -z "${BENCH_KEEP_SANDBOX:-}" ]; then
		log "stopping the sandbox in $DPWIN_SANDBOX_DIR"
		"$ROOT/test/sandbox.sh" stop
		"$ROOT/test/sandbox.sh" status | grep -q 'clickhouse: stopped' && reclaim_dropped
	fi
}
trap stop_sandbox EXIT
"$ROOT/test/sandbox.sh" start
# A PostgreSQL that was already running keeps the dpwin.so it loaded when
# it started (shared_preload_libraries), even after `make install` replaced
# the file: restart it, so that the code measured is the code just built.
pm=$(head -1 "$DPWIN_SANDBOX_DIR/pg/postmaster.pid")
if grep -q 'dpwin\.so (deleted)' "/proc/$pm/maps" 2>/dev/null; then
	log "restarting PostgreSQL: it runs an older dpwin.so than the one installed"
	"$ROOT/test/sandbox.sh" restart-pg
fi

# shellcheck disable=SC1091
. "$DPWIN_SANDBOX_DIR/env"
# shared_buffers as asked, or the sandbox's own; a restart applies it.
if [ -n "${BENCH_SHARED_BUFFERS:-}" ]; then
	psql -X -q -c "ALTER SYSTEM SET shared_buffers = '$BENCH_SHARED_BUFFERS'"
else
	psql -X -q -c "ALTER SYSTEM RESET shared_buffers"
fi
# pg_file_settings reads the files now; the server has what it started with.
want=$(psql -X -A -t -c "SELECT setting FROM pg_file_settings WHERE name = 'shared_buffers' AND error IS NULL ORDER BY seqno DESC LIMIT 1")
if [ "$want" != "$(psql -X -A -t -c "SHOW shared_buffers")" ]; then
	log "restarting PostgreSQL: shared_buffers changes"
	"$ROOT/test/sandbox.sh" restart-pg
fi
BENCH_SHARED_BUFFERS=$(psql -X -A -t -c "SHOW shared_buffers")
export BENCH_SHARED_BUFFERS
# The delay proxy and query-log stamper (test/bench/netdelay.c).
cc -O2 -Wall -pthread -o "$BENCH_OUT/netdelay" "$ROOT/test/bench/netdelay.c"
perl "$ROOT/test/bench/bench.pl"
