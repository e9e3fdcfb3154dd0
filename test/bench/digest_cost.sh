#!/usr/bin/env bash
#
# test/bench/digest_cost.sh — what ClickHouse spends on a staging digest,
# and on the digests that could replace it (docs/benchmark.md, "What
# ClickHouse's one core carries").
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
#   concat           dpwin's digest over the same RowBinary bytes built
#                    column by column with concat() instead of formatRow
#                    (fixed-width values by reinterpretAsFixedString, a
#                    NULL flag byte, a string's varint length); before
#                    the rounds every row's bytes are checked to equal
#                    formatRow's
#   lanes            a digest over the typed columns without a row's
#                    bytes: two keyed linear maps of the row's values
#                    (a string by its sipHash64Keyed, a NULL by a term of
#                    its own) into two 64-bit lanes, and one
#                    sipHash128ReferenceKeyed over the two lanes
#   lanes_only       the two lanes summed, without the SipHash over them
#   prime            the same with lanes a universal hash: each 64-bit
#                    value as two 32-bit halves, each times a key below
#                    p = 2^61 - 1, summed in UInt128 and reduced modulo p
#                    (a sum modulo 2^64 is not universal: two values that
#                    differ by 2^63 collide under half of the keys)
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

# RowBinary by concat(): a varint of up to three bytes (strings here are
# short), a Nullable value as its flag byte and then its bytes.
varint() {
	echo "multiIf($1 < 128, char($1), $1 < 16384, char(bitOr(bitAnd($1, 127), 128), bitShiftRight($1, 7)),
		char(bitOr(bitAnd($1, 127), 128), bitOr(bitAnd(bitShiftRight($1, 7), 127), 128), bitShiftRight($1, 14)))"
}
nullable() { echo "if(isNull($1), char(1), concat(char(0), $2))"; }
row="concat(reinterpretAsFixedString(id), $(nullable w 'reinterpretAsFixedString(assumeNotNull(w))'),
	$(nullable amount 'reinterpretAsFixedString(assumeNotNull(amount))'),
	$(nullable note "$(varint 'length(assumeNotNull(note))'), assumeNotNull(note)"),
	reinterpretAsFixedString(qty), reinterpretAsFixedString(flag))"
hc="sipHash128ReferenceKeyed($k1, $row)"

# A lane: the sum (modulo 2^64) of each value times a key of its own.
lane() {
	echo "(toUInt64($1) * reinterpretAsUInt64(id) + toUInt64($2) * ifNull(reinterpretAsUInt64(w), 0)
		+ toUInt64($3) * isNull(w) + toUInt64($4) * ifNull(reinterpretAsUInt64(amount), 0)
		+ toUInt64($5) * isNull(amount) + toUInt64($6) * ifNull(sipHash64Keyed($k1, note), 0)
		+ toUInt64($7) * isNull(note) + toUInt64($8) * reinterpretAsUInt64(toInt64(qty)) + toUInt64($9) * toUInt64(flag))"
}
l1=$(lane 11400714819323198485 13787848793156543929 10723151780598845931 12638153115695167455 9576890767 \
	14029467366897019727 1609587929392839161 9650029242287828579 2870177450012600261)
l2=$(lane 7046029254386353131 11140372383758409869 12157665459056928801 17280841924051099017 6151981493 \
	7316578467137049089 4989356788471474417 14313749767032793493 1442695040888963407)
hl="sipHash128ReferenceKeyed($k1, concat(reinterpretAsFixedString($l1), reinterpretAsFixedString($l2)))"

# A lane modulo p: a value's halves times two keys of their own.
half_terms() { echo "toUInt128($2) * bitAnd($1, 4294967295) + toUInt128($3) * bitShiftRight($1, 32)"; }
prime_lane() {
	echo "toUInt64(($(half_terms 'reinterpretAsUInt64(id)' "$1" "$2")
		+ $(half_terms 'ifNull(reinterpretAsUInt64(w), 0)' "$3" "$4") + toUInt128($5) * isNull(w)
		+ $(half_terms 'ifNull(reinterpretAsUInt64(amount), 0)' "$6" "$7") + toUInt128($8) * isNull(amount)
		+ $(half_terms "ifNull(sipHash64Keyed($k1, note), 0)" "$9" "${10}") + toUInt128(${11}) * isNull(note)
		+ $(half_terms 'reinterpretAsUInt64(toInt64(qty))' "${12}" "${13}") + toUInt128(${14}) * toUInt64(flag))
		% 2305843009213693951)"
}
p1=$(prime_lane 1140071481932319848 1378784879315654392 1072315178059884593 1263815311569516745 957689076712345 \
	1402946736689701972 160958792939283916 965002924228782857 287017745001260026 704602925438635313 \
	1114037238375840986 1215766545905692880 1728084192405109901 615198149312345)
p2=$(prime_lane 731657846713704908 498935678847147441 1431374976703279349 144269504088896340 215063252345 \
	1999561734096531202 823748910274619111 1517392046528301947 386512735019283746 2091827364501928374 \
	572910384756102938 1938475610293847561 1029384756102938475 402938475612345)
hp="sipHash128ReferenceKeyed($k1, concat(reinterpretAsFixedString($p1), reinterpretAsFixedString($p2)))"
declare -A sql=(
	[count]="SELECT count() FROM $DB.t"
	[format]="SELECT count(), sum(length(formatRow('RowBinary', $cols))) FROM $DB.t"
	[dpwin]="SELECT count(), sum(reinterpretAsUInt64($h)), sum(reinterpretAsUInt64(substring($h, 9, 8))) FROM $DB.t"
	[pair]="SELECT count(), sum(sipHash64Keyed($k1, formatRow('RowBinary', $cols))), sum(sipHash64Keyed($k2, formatRow('RowBinary', $cols))) FROM $DB.t"
	[typed]="SELECT count(), sum(sipHash64Keyed($k1, $cols)), sum(sipHash64Keyed($k2, $cols)) FROM $DB.t"
	[typed_not_null]="SELECT count(), sum(sipHash64Keyed($k1, $nn)), sum(sipHash64Keyed($k2, $nn)) FROM $DB.t"
	[concat]="SELECT count(), sum(reinterpretAsUInt64($hc)), sum(reinterpretAsUInt64(substring($hc, 9, 8))) FROM $DB.t"
	[lanes]="SELECT count(), sum(reinterpretAsUInt64($hl)), sum(reinterpretAsUInt64(substring($hl, 9, 8))) FROM $DB.t"
	[lanes_only]="SELECT count(), sum($l1), sum($l2) FROM $DB.t"
	[prime]="SELECT count(), sum(reinterpretAsUInt64($hp)), sum(reinterpretAsUInt64(substring($hp, 9, 8))) FROM $DB.t"
)
names=(count format dpwin pair typed typed_not_null concat lanes lanes_only prime)
if [ "$(ch "SELECT countIf($row != formatRow('RowBinary', $cols)) FROM $DB.t")" != 0 ]; then
	echo "digest_cost: concat() does not build formatRow's bytes" >&2
	exit 1
fi
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
