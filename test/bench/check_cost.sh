#!/usr/bin/env bash
#
# test/bench/check_cost.sh — what a refresh's checks cost the ClickHouse
# side in CPU, piece by piece (docs/benchmark.md, "What ClickHouse's one
# core carries").
#
# Needs the benchmark's sandbox with the 30-day dataset (run
# `BENCH_KEEP_SANDBOX=1 BENCH_SOURCE_DAYS=30 BENCH_SIZES=30 test/bench/run.sh`
# once; DPWIN_SANDBOX_DIR and the ports as for that sandbox).  On one day
# of the day-partitioned base (about 100 000 rows, copied into a scratch
# table as a staging table holds a chunk) and on the base itself, each
# kind below is sent CC_N times (default 20) over one kept-alive HTTP
# connection, and the endpoint's CPU time (utime + stime of its process,
# /proc) is read before and after.  Each kind runs CC_ROUNDS times
# (default 3) in rotating order; the medians are printed, in ms of CPU a
# statement:
#
#   select_1        SELECT 1: the floor of any statement
#   digest          a chunk's staging digest alone (count and the two sums
#                   of SipHash-128 over formatRow)
#   digest_facts    the same with the chunk's window facts
#   staging_check   the staging digest's structure check alone (a row of
#                   system.tables and the table's system.columns)
#   worker_digest   the statement a worker sends: digest, facts and check
#   kept_rows       the target's rows inside and outside a 7-day window in
#                   the partitions the minmax indexes do not put wholly
#                   outside it (the count that proves the dropped
#                   partitions hold no kept row)
#   null_rows       the NULL-window rows of those partitions alone, from
#                   the NULL map
#
# Not part of CI.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
eval "$("$ROOT/test/sandbox.sh" env)"
N=${CC_N:-20}
ROUNDS=${CC_ROUNDS:-3}
DB=bench_r${CC_ROWS_PER_DAY:-100000}_d30
BASE=$DB.base_day_30
S=$DB.check_cost_chunk

# shellcheck source=test/bench/lib.sh
. "$ROOT/test/bench/lib.sh"

[ "$(ch "SELECT count() FROM system.tables WHERE database = '$DB' AND name = 'base_day_30'")" = 1 ] ||
	{ echo "check_cost: no $BASE: run the benchmark with BENCH_SOURCE_DAYS=30 first" >&2; exit 1; }

endpoint=$(cat "$DPWIN_SANDBOX_DIR/ch.pid")
tck=$(getconf CLK_TCK)
ticks() { cpu_ticks "$endpoint"; }

# The base's last midnight, and the day three days before it.
last=$(ch "SELECT toUnixTimestamp64Micro(toDateTime64(toDate(max(w)) + 1, 6, 'UTC')) FROM $BASE")
day=$((last - 4 * 86400000000))
day_id=$(ch "SELECT toYYYYMMDD(fromUnixTimestamp64Micro(toInt64($day), 'UTC'))")
ch "DROP TABLE IF EXISTS $S SYNC"
ch "CREATE TABLE $S AS $BASE"
ch "ALTER TABLE $S ATTACH PARTITION ID '$day_id' FROM $BASE"

bound() { printf "fromUnixTimestamp64Micro(toInt64(%s), 'UTC')" "$1"; }
in_range() { printf "toUInt8(ifNull((\`w\` >= %s AND \`w\` < %s), 0))" "$(bound "$1")" "$(bound "$2")"; }
# shellcheck disable=SC2016  # backquoted ClickHouse identifiers, not a command
cols='`id`, `w`, `amount`, `note`, `qty`, `flag`'
h="sipHash128ReferenceKeyed((toUInt64(16320693780829924789), toUInt64(4530462575211771968)), formatRow('RowBinary', $cols))"
digest="count(), sum(reinterpretAsUInt64($h)), sum(reinterpretAsUInt64(substring($h, 9, 8)))"
chunk_in=$(in_range "$day" $((day + 86400000000)))
facts="countIf($chunk_in), [], toString(minOrNullIf(\`w\`, $chunk_in)), toString(maxOrNullIf(\`w\`, $chunk_in))"
columns=$(ch "SELECT toString(groupArray(tuple(name, type))) FROM (SELECT name, type FROM system.columns WHERE database = '$DB' AND \`table\` = 'check_cost_chunk' ORDER BY position) FORMAT TSVRaw")
engine=$(ch "SELECT toString(tuple(engine_full)) FROM system.tables WHERE database = '$DB' AND name = 'check_cost_chunk' FORMAT TSVRaw")
check="toUInt8((SELECT count() FROM system.tables WHERE database = '$DB' AND name = 'check_cost_chunk' AND engine_full = $engine) = 1 AND (SELECT arrayMap(x -> tuple(x.2, x.3), arraySort(groupArray(tuple(position, name, type)))) FROM system.columns WHERE database = '$DB' AND \`table\` = 'check_cost_chunk') = $columns)"
window_in=$(in_range $((last - 7 * 86400000000)) "$last")
outside=$(ch "SELECT arrayStringConcat(groupArray(concat('''', partition_id, '''')), ', ') FROM (SELECT DISTINCT partition_id FROM system.parts WHERE database = '$DB' AND \`table\` = 'base_day_30' AND active AND match(partition_id, '^[0-9]{8}\$') AND toUInt32(partition_id) < toYYYYMMDD(fromUnixTimestamp64Micro(toInt64($((last - 7 * 86400000000))), 'UTC')) ORDER BY partition_id) FORMAT TSVRaw")

work=$(mktemp -d)
trap 'rm -rf "$work"; ch "DROP TABLE IF EXISTS $S SYNC" >/dev/null' EXIT
echo "SELECT 1" >"$work/select_1.sql"
echo "SELECT $digest FROM $S" >"$work/digest.sql"
echo "SELECT $digest, $facts FROM $S" >"$work/digest_facts.sql"
echo "SELECT $check" >"$work/staging_check.sql"
echo "SELECT $digest, $facts, $check FROM $S" >"$work/worker_digest.sql"
echo "SELECT countIf($window_in), count() - countIf($window_in) FROM $BASE WHERE _partition_id NOT IN ($outside)" >"$work/kept_rows.sql"
echo "SELECT count() FROM $BASE PREWHERE isNull(\`w\`) WHERE _partition_id NOT IN ($outside)" >"$work/null_rows.sql"

names=(select_1 digest digest_facts staging_check worker_digest kept_rows null_rows)
declare -A cpu
for n in "${names[@]}"; do
	# each answer must be a row, not an error; the check must pass
	a=$(ch "$(cat "$work/$n.sql")")
	[ "$n" != staging_check ] || [ "$a" = 1 ] || { echo "check_cost: the structure check answered $a" >&2; exit 1; }
	request_options "" "$work/$n.sql" >"$work/$n.req"
	repeat_options "$N" "$work/$n.req" >"$work/$n.cfg"
done

for ((r = 0; r < ROUNDS; r++)); do
	for ((i = 0; i < ${#names[@]}; i++)); do
		n=${names[$(((i + r) % ${#names[@]}))]}
		c0=$(ticks)
		curl -K "$work/$n.cfg"
		c1=$(ticks)
		cpu[$n]="${cpu[$n]:-} $(awk -v d=$((c1 - c0)) -v t="$tck" -v k="$N" 'BEGIN {printf "%.2f", d * 1000 / t / k}')"
	done
done

printf '# %d statements a kind over one connection, %d rounds, load %s; one day of %s: %s rows; medians, ms of CPU a statement\n' \
	"$N" "$ROUNDS" "$(cut -d' ' -f1-3 /proc/loadavg)" "$BASE" "$(ch "SELECT count() FROM $S")"
printf '%-14s %8s\n' kind cpu
for n in "${names[@]}"; do
	# shellcheck disable=SC2086
	printf '%-14s %8s\n' "$n" "$(median ${cpu[$n]})"
done
