#!/usr/bin/env bash
#
# test/bench/clone_merge.sh — a refresh's DELETE in a clone of a target that
# still holds the previous refresh's staged parts (docs/benchmark.md, "The
# last full run, and a refresh run again at once").
#
# Needs a running sandbox (test/sandbox.sh start; DPWIN_SANDBOX_DIR and the
# ports as for the sandbox).  Makes, in the database dpwin_bench_clonemerge
# of the endpoint, two unpartitioned tables like the benchmark's: `one`, 3 M
# rows of 2026-01-01 .. 2026-01-30 in the parts of one INSERT (three of
# about a million rows), and `eight`, the same and seven parts of 100 000
# rows each of the window 2026-01-24 .. 2026-01-31 (as a published target
# holds its clone's parts and the seven chunks' staged parts), merges
# stopped on both so that they keep their parts.
# Each round clones each table (CREATE ... AS and ATTACH PARTITION ... FROM,
# as a refresh clones a cut partition into its scratch table, merges on)
# and removes the window from the clone with a lightweight DELETE, in
# alternating order (CM_ROUNDS, default 7), while a second connection reads
# system.merges every 20 ms; checks that both clones then hold the rows of
# `one` outside the window; prints each round's time of the DELETE, from
# sending it to its answer, and the merges of several parts seen during it,
# then the medians, in ms.  Not part of CI.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
eval "$("$ROOT/test/sandbox.sh" env)"
ROUNDS=${CM_ROUNDS:-7}
DB=dpwin_bench_clonemerge
WINDOW="w >= toDateTime64('2026-01-24 00:00:00', 6, 'UTC') AND w < toDateTime64('2026-01-31 00:00:00', 6, 'UTC')"

# shellcheck source=test/bench/lib.sh
. "$ROOT/test/bench/lib.sh"

ch "DROP DATABASE IF EXISTS $DB SYNC" >/dev/null
ch "CREATE DATABASE $DB" >/dev/null
for t in one eight; do
	ch "CREATE TABLE $DB.$t $EVENT_COLS ENGINE = MergeTree ORDER BY id" >/dev/null
	ch "SYSTEM STOP MERGES $DB.$t" >/dev/null
	ch "INSERT INTO $DB.$t $(event_rows 3000000)" >/dev/null
done
for ((i = 0; i < 7; i++)); do
	ch "INSERT INTO $DB.eight SELECT 10000000 + $i * 100000 + number,
		toDateTime64('2026-01-24 00:00:00', 6, 'UTC') + toIntervalMicrosecond(($i * 100000 + number) * 864000),
		1, 'staged', 1, true FROM numbers(100000)" >/dev/null
done
echo "# parts: one $(ch "SELECT count() FROM system.parts WHERE database = '$DB' AND table = 'one' AND active")," \
	"eight $(ch "SELECT count() FROM system.parts WHERE database = '$DB' AND table = 'eight' AND active")"
expect=$(ch "SELECT count(), sum(cityHash64(*)) FROM $DB.one WHERE NOT ($WINDOW) OR w IS NULL")

declare -A times
for ((r = 0; r < ROUNDS; r++)); do
	order=(one eight)
	((r % 2)) && order=(eight one)
	line="round $r:"
	for t in "${order[@]}"; do
		c=c_$t
		ch "DROP TABLE IF EXISTS $DB.$c SYNC" >/dev/null
		ch "CREATE TABLE $DB.$c AS $DB.$t" >/dev/null
		ch "ALTER TABLE $DB.$c ATTACH PARTITION tuple() FROM $DB.$t" >/dev/null
		seen=$(mktemp)
		(
			while :; do
				ch "SELECT num_parts FROM system.merges WHERE database = '$DB' AND table = '$c'
					AND NOT is_mutation AND num_parts > 1" >>"$seen" 2>/dev/null || true
				sleep 0.02
			done
		) &
		watcher=$!
		t0=$(date +%s%N)
		ch "DELETE FROM $DB.$c WHERE $WINDOW SETTINGS lightweight_deletes_sync = 2" >/dev/null
		t1=$(date +%s%N)
		kill "$watcher" 2>/dev/null || true
		wait "$watcher" 2>/dev/null || true
		merges=$(sort -u "$seen" | tr '\n' ' ')
		rm -f "$seen"
		if [ "$(ch "SELECT count(), sum(cityHash64(*)) FROM $DB.$c WHERE id < 10000000")" != "$expect" ] ||
			[ "$(ch "SELECT count() FROM $DB.$c WHERE id >= 10000000")" != 0 ]; then
			echo "clone_merge: the clone of $t does not hold the rows outside the window" >&2
			exit 1
		fi
		ms=$(((t1 - t0) / 1000000))
		times[$t]="${times[$t]:-} $ms"
		line="$line $t ${ms} ms (merges of parts: ${merges:-none});"
	done
	echo "$line"
done
for t in one eight; do
	# shellcheck disable=SC2086
	echo "median, clone of $t: $(median ${times[$t]}) ms"
done
ch "DROP DATABASE $DB SYNC" >/dev/null
