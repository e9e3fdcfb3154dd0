#!/usr/bin/env bash
#
# test/bench/run.sh — the dpwin benchmark (docs/benchmark.md).
#
# Starts a sandbox of its own (test/bench/out/sb, PostgreSQL port 54990,
# ClickHouse endpoint ports 18990/18991) unless one is already running
# there, generates the dataset, measures, prints the table, writes
# test/bench/out/results.csv and test/bench/out/phases.png, and stops the
# sandbox it started.  Not part of CI.
#
# Parameters (environment; defaults in brackets):
#   BENCH_DAYS [100]  BENCH_ROWS_PER_DAY [100000]  BENCH_WINDOW_DAYS [7]
#   BENCH_BIG_WINDOW_DAYS [10 x window]  BENCH_PARALLELISM ["1 2 4"]
#   BENCH_SCALE_SMALL_DAYS [30]  BENCH_SCALE_LARGE_DAYS [300]
#   BENCH_SCALE_ROWS_PER_DAY [BENCH_ROWS_PER_DAY]  BENCH_REPEAT [3]
#   BENCH_ONLY [all: dpwin,peer,limits,scaling,window]
#   BENCH_KEEP_SANDBOX=1 leaves the sandbox running (the dataset is reused
#   by the next run with the same parameters either way: it lives in the
#   sandbox's folder).
#   DPWIN_SANDBOX_DIR, DPWIN_PGPORT, DPWIN_CH_PORT, DPWIN_CH_CONTROL_PORT
#   choose another sandbox.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export BENCH_OUT=${BENCH_OUT:-$ROOT/test/bench/out}
export DPWIN_SANDBOX_DIR=${DPWIN_SANDBOX_DIR:-$BENCH_OUT/sb}
export DPWIN_PGPORT=${DPWIN_PGPORT:-54990}
export DPWIN_CH_PORT=${DPWIN_CH_PORT:-18990}
export DPWIN_CH_CONTROL_PORT=${DPWIN_CH_CONTROL_PORT:-18991}

log() { printf 'bench: %s\n' "$*" >&2; }

mkdir -p "$BENCH_OUT"
started=0
if "$ROOT/test/sandbox.sh" status | grep -q stopped; then
	started=1
fi
# Tables dropped during a run (staging tables, backups, the peer's old
# targets: several GB at the defaults) wait in the engine's trash for 8
# minutes, as Atomic databases delay the removal.  Once the endpoint is
# down, finish that removal here, as the engine would.
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
perl "$ROOT/test/bench/bench.pl"
