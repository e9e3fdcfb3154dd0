#!/usr/bin/env bash
#
# test/bench/format_cost.sh — what ClickHouse spends on a chunk's INSERT
# by the format of its body: RowBinary, which a refresh sends, or Native,
# ClickHouse's columnar format, whose values arrive column by column
# (docs/benchmark.md, "What ClickHouse's one core carries").
#
# Needs a running sandbox (test/sandbox.sh start; DPWIN_SANDBOX_DIR and the
# ports as for the sandbox).  Makes one table in the database
# dpwin_bench_format of the endpoint with the columns of the benchmark's
# targets (all but id Nullable): FC_ROWS rows (default 697 692, a 7-day
# window of the benchmark), and writes its rows once in each format to
# files beside the sandbox.  Each round (FC_ROUNDS, default 7; the order
# of the formats alternates) makes an empty copy of the table, INSERTs one
# file into it over HTTP and reads the endpoint's CPU time around the
# INSERT, checks that the copy holds the same multiset of rows as the
# table (count and a sum of cityHash64 over each row, not dpwin's digest),
# and drops it.  Prints the medians, in ms, of the endpoint's CPU and of
# the wall time from sending each INSERT to its answer.  Not part of CI.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
eval "$("$ROOT/test/sandbox.sh" env)"
ROUNDS=${FC_ROUNDS:-7}
ROWS=${FC_ROWS:-697692}
DB=dpwin_bench_format
FILES="$DPWIN_SANDBOX_DIR/format_cost"

# shellcheck source=test/bench/lib.sh
. "$ROOT/test/bench/lib.sh"

endpoint=$(cat "$DPWIN_SANDBOX_DIR/ch.pid")
tck=$(getconf CLK_TCK)
cols="(id Int64, w Nullable(DateTime64(6, 'UTC')), amount Nullable(Decimal(18, 2)),
	note Nullable(String), qty Nullable(Int32), flag Nullable(Bool))"

ch "CREATE DATABASE IF NOT EXISTS $DB" >/dev/null
ch "DROP TABLE IF EXISTS $DB.t SYNC" >/dev/null
ch "CREATE TABLE $DB.t $cols ENGINE = MergeTree ORDER BY id" >/dev/null
ch "INSERT INTO $DB.t SELECT number,
	if(number % 37 = 5, NULL, toDateTime64('2026-03-05 00:00:00', 6, 'UTC') + toIntervalMicrosecond(number * 866000)),
	if(number % 43 = 1, NULL, toDecimal64(number / 7, 2)),
	if(number % 47 = 2, NULL, leftPad(concat('n', toString(number)), 40, 'x')),
	if(number % 53 = 3, NULL, toInt32(number % 1000)),
	if(number % 59 = 4, NULL, number % 3 = 0)
	FROM numbers($ROWS)" >/dev/null
ch "OPTIMIZE TABLE $DB.t FINAL" >/dev/null
want=$(ch "SELECT count(), sum(cityHash64(*)) FROM $DB.t")

mkdir -p "$FILES"
for f in RowBinary Native; do
	ch "SELECT * FROM $DB.t FORMAT $f" >"$FILES/rows.$f"
	request_options "query=INSERT%20INTO%20$DB.c%20FORMAT%20$f" "$FILES/rows.$f" >"$FILES/insert.$f"
done

declare -A cpu wall
for ((r = 0; r < ROUNDS; r++)); do
	if ((r % 2 == 0)); then order="RowBinary Native"; else order="Native RowBinary"; fi
	for f in $order; do
		ch "CREATE TABLE $DB.c AS $DB.t" >/dev/null
		c0=$(cpu_ticks "$endpoint")
		t0=$(date +%s%N)
		curl -K "$FILES/insert.$f"
		t1=$(date +%s%N)
		c1=$(cpu_ticks "$endpoint")
		got=$(ch "SELECT count(), sum(cityHash64(*)) FROM $DB.c")
		if [ "$got" != "$want" ]; then
			echo "format_cost: the $f copy holds $got, the table $want" >&2
			exit 1
		fi
		ch "DROP TABLE $DB.c SYNC" >/dev/null
		cpu[$f]="${cpu[$f]:-} $(((c1 - c0) * 1000 / tck))"
		wall[$f]="${wall[$f]:-} $(((t1 - t0) / 1000000))"
	done
done

printf '%d rows, %d rounds; RowBinary %d bytes, Native %d bytes\n' "$ROWS" "$ROUNDS" \
	"$(stat -c %s "$FILES/rows.RowBinary")" "$(stat -c %s "$FILES/rows.Native")"
printf '%-10s %12s %12s   %s\n' format "cpu ms" "wall ms" "cpu ms by round"
for f in RowBinary Native; do
	# shellcheck disable=SC2086
	printf '%-10s %12s %12s   %s\n' "$f" "$(median ${cpu[$f]})" "$(median ${wall[$f]})" "${cpu[$f]# }"
done
rm -rf "$FILES"
ch "DROP DATABASE $DB SYNC" >/dev/null
