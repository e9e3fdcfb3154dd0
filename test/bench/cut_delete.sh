#!/usr/bin/env bash
#
# test/bench/cut_delete.sh — removing a window's rows from the partition it
# cuts: one mutation (ALTER TABLE ... DELETE WHERE, what a refresh sends on
# a partitioned target) against a lightweight DELETE followed by APPLY
# DELETED MASK (what it sent before).  docs/benchmark.md, "The cut
# partitions", quotes one run.
#
# Needs a running sandbox (test/sandbox.sh start; DPWIN_SANDBOX_DIR and the
# ports as for the sandbox).  Makes one table in the database
# dpwin_bench_cutdel of the endpoint, like the benchmark's month-partitioned
# 30-day base: 3 M rows from 2026-01-01 to 2026-01-30, PARTITION BY
# toYYYYMM(w), a Nullable window column with a NULL in every 37th row, one
# part a partition.  Each round clones the January partition (ATTACH
# PARTITION ... FROM, as a refresh clones a cut partition into its scratch
# table) twice and removes the window 2026-01-24 .. 2026-01-31 from each
# clone, one way each, in alternating order (CD_ROUNDS, default 7).  Every
# round checks that both clones hold the same multiset of rows (count and a
# sum of row hashes) and no part with lightweight-deleted rows, and times
# the next refresh's judgement of the partitions on the masked clone (before
# its APPLY DELETED MASK), which reads the window column of every row;
# prints the medians of the time each statement took, in ms.  Not part of
# CI.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
eval "$("$ROOT/test/sandbox.sh" env)"
ROUNDS=${CD_ROUNDS:-7}
DB=dpwin_bench_cutdel

# shellcheck source=test/bench/lib.sh
. "$ROOT/test/bench/lib.sh"
# The time one statement took, from sending it to its answer, as a
# refresh waits for it (the summary header's elapsed_ns leaves out part of
# a mutation's wait).
elapsed_ms() {
	curl -sS --fail-with-body -o /dev/null -w '%{time_total}' -u "$DPWIN_CH_USER:$DPWIN_CH_PASSWORD" \
		"$DPWIN_CH_URL/" --data-binary "$1" | awk '{printf "%.1f", $1 * 1000}'
}

ch "CREATE DATABASE IF NOT EXISTS $DB" >/dev/null
if [ "$(ch "EXISTS TABLE $DB.month30")" != 1 ]; then
	echo "cut_delete: making the table" >&2
	ch "CREATE TABLE $DB.month30 $EVENT_COLS ENGINE = MergeTree PARTITION BY toYYYYMM(w) ORDER BY id
		SETTINGS allow_nullable_key = 1" >/dev/null
	ch "INSERT INTO $DB.month30 $(event_rows 3000000)" >/dev/null
	ch "OPTIMIZE TABLE $DB.month30 FINAL" >/dev/null
fi

win="toUInt8(ifNull(w >= toDateTime64('2026-01-24 00:00:00', 6, 'UTC') AND w < toDateTime64('2026-01-31 00:00:00', 6, 'UTC'), 0)) = 1"
clone() {
	ch "DROP TABLE IF EXISTS $DB.$1 SYNC" >/dev/null
	ch "CREATE TABLE $DB.$1 AS $DB.month30" >/dev/null
	ch "ALTER TABLE $DB.$1 ATTACH PARTITION ID '202601' FROM $DB.month30" >/dev/null
}
facts() {
	ch "SELECT count(), sum(cityHash64(id, w, amount, note, qty, flag)),
		(SELECT sum(has_lightweight_delete) FROM system.parts WHERE database = '$DB' AND \`table\` = '$1' AND active)
		FROM $DB.$1"
}

printf '# %s UTC, commit %s, load %s\n' "$(date -u '+%Y-%m-%d %H:%M')" \
	"$(git -C "$ROOT" rev-parse --short HEAD)" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '# kept rows of the cut partition: %s\n' \
	"$(ch "SELECT countIf(NOT ($win)) FROM $DB.month30 WHERE _partition_id = '202601'")"
# the statement of classify_partitions() in src/generation.c when the
# server cannot answer from the minmax indexes
judge="SELECT _partition_id AS p, _part AS pt, count(), min(w), max(w) FROM $DB.c_lw GROUP BY p, pt
	FORMAT Null SETTINGS force_optimize_projection = 0, use_query_condition_cache = 0"
tm=() tl=() td=() ta=() tj=()
for r in $(seq "$ROUNDS"); do
	for way in $( ((r % 2)) && echo "mut lw" || echo "lw mut"); do
		clone "c_$way"
		if [ "$way" = mut ]; then
			tm+=("$(elapsed_ms "ALTER TABLE $DB.c_mut DELETE WHERE $win SETTINGS mutations_sync = 2")")
		else
			d=$(elapsed_ms "DELETE FROM $DB.c_lw WHERE $win SETTINGS lightweight_deletes_sync = 2")
			# what the next refresh's judgement of the partitions reads
			# while masked rows are left: the window column of every row
			tj+=("$(elapsed_ms "$judge")")
			a=$(elapsed_ms "ALTER TABLE $DB.c_lw APPLY DELETED MASK SETTINGS mutations_sync = 2")
			td+=("$d") ta+=("$a") tl+=("$(echo "$d + $a" | bc -l)")
		fi
	done
	fm=$(facts c_mut) fl=$(facts c_lw)
	[ "$fm" = "$fl" ] || { echo "cut_delete: the clones differ: $fm / $fl" >&2; exit 1; }
	[ "$(cut -f3 <<<"$fm")" = 0 ] || { echo "cut_delete: lightweight-deleted rows left: $fm" >&2; exit 1; }
done
ch "DROP TABLE IF EXISTS $DB.c_mut SYNC" >/dev/null
ch "DROP TABLE IF EXISTS $DB.c_lw SYNC" >/dev/null
printf '%-48s %8s\n' 'way (medians of the rounds, ms)' elapsed
printf '%-48s %8s\n' 'lightweight DELETE' "$(median "${td[@]}")"
printf '%-48s %8s\n' 'APPLY DELETED MASK' "$(median "${ta[@]}")"
printf '%-48s %8s\n' 'lightweight DELETE + APPLY DELETED MASK' "$(median "${tl[@]}")"
printf '%-48s %8s\n' 'ALTER TABLE ... DELETE WHERE (one mutation)' "$(median "${tm[@]}")"
printf '%-48s %8s\n' 'the judgement, masked rows left (reads w)' "$(median "${tj[@]}")"
printf '# per row: the mutation %.3f us a row of the cut partition, the read %.3f us a row of the table\n' \
	"$(echo "$(median "${tm[@]}") * 1000 / $(ch "SELECT count() FROM $DB.month30")" | bc -l)" \
	"$(echo "$(median "${tj[@]}") * 1000 / $(ch "SELECT count() FROM $DB.month30")" | bc -l)"
printf '# load at the end %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
