#!/usr/bin/env bash
#
# test/bench/bodies.sh — what ClickHouse spends on a refresh whose chunks
# are sent in two request bodies each against one.  A chunk's rows now go
# in one streamed INSERT whatever max_encoded_bytes is, so the two settings
# send the same requests.  The script compares two INSERTs a chunk with one
# only when it runs against a library from before that change.
#
# Needs the benchmark's sandbox running with its dataset (run
# `BENCH_KEEP_SANDBOX=1 test/bench/run.sh` once; BODIES_SOURCE_DAYS names
# it, default 30).  Makes a route of a 7-day window in 1-day chunks at
# parallelism 2 into a fresh clone of the day-partitioned 30-day base, and
# for BODIES_ROUNDS rounds (default 6) refreshes it with max_encoded_bytes
# of 4 MB (the default: a chunk of the benchmark's window is sent in two
# INSERTs) and of 16 MB (one INSERT), in turn, each on a fresh clone.
# Prints, per refresh: its wall time (ms, around the psql call), the CPU
# ticks (1/100 s) of the endpoint's process during it and until the
# server's merges are done after it, the target's active parts after it,
# and the rows of the published window, which must be the source's
# (counted on both sides; the refresh itself verified each chunk by its
# digest).  Not part of CI.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${BENCH_OUT:-$ROOT/test/bench/out}
export DPWIN_SANDBOX_DIR=${DPWIN_SANDBOX_DIR:-$OUT/sb}
ROUNDS=${BODIES_ROUNDS:-6}
TAG="r${BODIES_ROWS_PER_DAY:-100000}_d${BODIES_SOURCE_DAYS:-30}"
DB=bench_$TAG
log() { printf 'bodies: %s\n' "$*" >&2; }

[ -f "$DPWIN_SANDBOX_DIR/env" ] || { log "no benchmark sandbox in $DPWIN_SANDBOX_DIR"; exit 1; }
# shellcheck disable=SC1091
. "$DPWIN_SANDBOX_DIR/env"
# shellcheck source=test/bench/lib.sh
. "$ROOT/test/bench/lib.sh"

[ "$(ch "SELECT count() FROM system.tables WHERE database = '$DB' AND name = 'base_day_30'")" = 1 ] ||
	{ log "no $DB.base_day_30: run the benchmark first"; exit 1; }
chpid=$(pgrep -f -- "--config-file $DPWIN_SANDBOX_DIR/ch_config.xml" | head -1)
[ -n "$chpid" ] || { log "no endpoint process of $DPWIN_SANDBOX_DIR"; exit 1; }
ticks() { cpu_ticks "$chpid"; }
end=$(pgq "SELECT to_char(max(w)::date + 1, 'YYYY-MM-DD') FROM bench_$TAG.events")
source_rows=$(pgq "SELECT count(*) FROM bench_$TAG.events
	WHERE w >= timestamptz '$end 00:00:00+00' - interval '7 days' AND w < timestamptz '$end 00:00:00+00'")

pgq "SELECT dpwin.drop_route('bodies') FROM dpwin.route WHERE route_name = 'bodies';
	SELECT dpwin.create_route('bodies', 'bench_$TAG.events', 'w', 'sandbox_ch', '$DB', 't_bodies',
		interval '7 days', interval '1 day', parallelism => 2)" >/dev/null 2>&1
echo "# test/bench/bodies.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$ROOT" rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# round body_mb wall_ms ch_ticks ch_ticks_after parts window_rows"
for i in $(seq 1 "$ROUNDS"); do
	for mb in 4 16; do
		clone_base t_bodies base_day_30
		drop_backups
		settle
		pgq "SELECT dpwin.alter_route('bodies', max_encoded_bytes => $((mb * 1048576)))" >/dev/null
		t0=$(ticks)
		s0=$(date +%s%N)
		state=$(pgq "SELECT state FROM dpwin_refresh('bodies', '$end 00:00:00+00')")
		s1=$(date +%s%N)
		t1=$(ticks)
		settle
		t2=$(ticks)
		parts=$(ch "SELECT count() FROM system.parts WHERE database = '$DB' AND table = 't_bodies' AND active")
		rows=$(ch "SELECT count() FROM $DB.t_bodies WHERE w >= toDateTime64('$end 00:00:00', 6, 'UTC') - INTERVAL 7 DAY
			AND w < toDateTime64('$end 00:00:00', 6, 'UTC')")
		check=$([ "$state" = completed ] && [ "$rows" = "$source_rows" ] && echo ok || echo "FAILED: $state, $rows rows against $source_rows")
		echo "$i $mb $(((s1 - s0) / 1000000)) $((t1 - t0)) $((t2 - t1)) $parts $rows $check"
	done
done
ch "DROP TABLE IF EXISTS $DB.t_bodies SYNC"
drop_backups
pgq "SELECT dpwin.drop_route('bodies')" >/dev/null
echo "# load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
