#!/usr/bin/env bash
#
# test/bench/digest_cost.sh — what ClickHouse spends on a staging digest,
# and on the digests that could replace it (docs/benchmark.md, "The
# digest's cost on the server").
#
# Needs a running sandbox (test/sandbox.sh start; DPWIN_SANDBOX_DIR and the
# ports as for the sandbox).  Makes one table in the database
# dpwin_bench_digest of the endpoint with the columns of the benchmark's
# events (Int64, Nullable DateTime64(6), Nullable Decimal(18, 2), Nullable
# String, Int32, Bool; a NULL in every 37th window value): DG_ROWS rows
# (default 1 000 000), one part.  Each round runs every expression below
# over the whole table with max_threads = 1 (one core's time, as a
# chunk's digest of one staging table takes it), in an order that rotates
# from round to round (DG_ROUNDS, default 7), and prints the medians of
# the time each took, from sending it to its answer, in ms:
#
#   count            count(): the floor of any statement over the table
#   format           formatRow('RowBinary', ...) alone, its bytes summed
#   dpwin            what a refresh sends: one pass of
#                    sipHash128ReferenceKeyed over one formatRow of the
#                    row, its two halves summed
#   pair             what a refresh of dpwin 0.1 sent (and an invocation
#                    of it still does): two sums of sipHash64Keyed under
#                    two keys over one formatRow of the row
#   typed            two sums of sipHash64Keyed over the typed columns, no
#                    formatRow (the "typed-column digest")
#   typed_not_null   the same over the columns with their NULLs replaced
#                    (what the typed hash costs without Nullable columns)
#
# The expressions compute different functions: there is no result to
# compare between them; each one's answer is checked to be the same in
# every round.  Not part of CI.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
eval "$("$ROOT/test/sandbox.sh" env)"
ROUNDS=${DG_ROUNDS:-7}
ROWS=${DG_ROWS:-1000000}
DB=dpwin_bench_digest

# shellcheck source=test/bench/lib.sh
. "$ROOT/test/bench/lib.sh"

ch "CREATE DATABASE IF NOT EXISTS $DB" >/dev/null
if [ "$(ch "SELECT count() FROM system.tables WHERE database = '$DB' AND name = 't'")" != 1 ] ||
	[ "$(ch "SELECT count() FROM $DB.t")" != "$ROWS" ]; then
	echo "digest_cost: making the table ($ROWS rows)" >&2
	ch "DROP TABLE IF EXISTS $DB.t SYNC" >/dev/null
	ch "CREATE TABLE $DB.t (id Int64, w Nullable(DateTime64(6, 'UTC')), amount Nullable(Decimal(18, 2)),
		note Nullable(String), qty Int32, flag Bool) ENGINE = MergeTree ORDER BY id" >/dev/null
	ch "INSERT INTO $DB.t SELECT number,
		if(number % 37 = 5, NULL, toDateTime64('2026-01-01 00:00:00', 6, 'UTC') + toIntervalMicrosecond(number * 864000)),
		if(number % 43 = 1, NULL, number / 7), if(number % 47 = 2, NULL, concat('n', toString(number % 1000))),
		toInt32(number % 100), number % 3 = 0
		FROM numbers($ROWS)" >/dev/null
	ch "OPTIMIZE TABLE $DB.t FINAL" >/dev/null
fi

cols='`id`, `w`, `amount`, `note`, `qty`, `flag`'
nn="id, ifNull(w, toDateTime64(0, 6, 'UTC')), ifNull(amount, toDecimal64(0, 2)), ifNull(note, ''), qty, flag"
k1='(toUInt64(4793260715006215843), toUInt64(8949485148759187680))'
k2='(toUInt64(1216405301342718271), toUInt64(6329802512240981187))'
h="sipHash128ReferenceKeyed($k1, formatRow('RowBinary', $cols))"
declare -A sql=(
	[count]="SELECT count() FROM $DB.t"
	[format]="SELECT count(), sum(length(formatRow('RowBinary', $cols))) FROM $DB.t"
	[dpwin]="SELECT count(), sum(reinterpretAsUInt64($h)), sum(reinterpretAsUInt64(substring($h, 9, 8))) FROM $DB.t"
	[pair]="SELECT count(), sum(sipHash64Keyed($k1, formatRow('RowBinary', $cols))), sum(sipHash64Keyed($k2, formatRow('RowBinary', $cols))) FROM $DB.t"
	[typed]="SELECT count(), sum(sipHash64Keyed($k1, $cols)), sum(sipHash64Keyed($k2, $cols)) FROM $DB.t"
	[typed_not_null]="SELECT count(), sum(sipHash64Keyed($k1, $nn)), sum(sipHash64Keyed($k2, $nn)) FROM $DB.t"
)
names=(count format dpwin pair typed typed_not_null)
declare -A times answer
for ((r = 0; r < ROUNDS; r++)); do
	for ((i = 0; i < ${#names[@]}; i++)); do
		n=${names[$(((i + r) % ${#names[@]}))]}
		t0=$(date +%s%N)
		a=$(ch "${sql[$n]} SETTINGS max_threads = 1")
		t1=$(date +%s%N)
		if [ -n "${answer[$n]:-}" ] && [ "${answer[$n]}" != "$a" ]; then
			echo "digest_cost: $n answered differently in round $r" >&2
			exit 1
		fi
		answer[$n]=$a
		times[$n]="${times[$n]:-} $(((t1 - t0) / 1000))"
	done
done

printf '# %d rows, max_threads = 1, %d rounds; medians of the time to the answer, ms\n' "$ROWS" "$ROUNDS"
for n in "${names[@]}"; do
	# shellcheck disable=SC2086
	m=$(median ${times[$n]})
	printf '%-16s %8.1f\n' "$n" "$(awk -v m="$m" 'BEGIN {print m / 1000}')"
done
