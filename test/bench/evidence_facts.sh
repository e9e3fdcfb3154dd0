#!/usr/bin/env bash
#
# test/bench/evidence_facts.sh — the evidence's window facts as one read of
# the window (and the NULL map for the NULL-window rows) against the two
# reads it replaced.
#
# Needs a running sandbox (test/sandbox.sh start; DPWIN_SANDBOX_DIR and the
# ports as for the sandbox).  Makes three tables in the database
# dpwin_bench_evfacts of the endpoint, like the benchmark's bases: 30 days
# day-partitioned (3 M rows), 300 days day-partitioned and 300 days
# unpartitioned (30 M rows each).  Then runs both statements in
# alternating rounds (EVF_ROUNDS, default 15) over a 7-day window and, on
# the 30-day table, the 30-day lookback of a skip_unchanged refresh.  Every
# round checks that the two answers are equal, byte for byte; prints the
# medians of the server's elapsed time.  one_read() below is the statement
# of dpwin_chprobe_window_facts() in src/chprobe.c, with the window
# predicate written plainly: keep the two alike.  Not part of CI.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
eval "$("$ROOT/test/sandbox.sh" env)"
ROUNDS=${EVF_ROUNDS:-15}
DB=dpwin_bench_evfacts

ch() {
	curl -sS --fail-with-body -u "$DPWIN_CH_USER:$DPWIN_CH_PASSWORD" \
		"$DPWIN_CH_URL/?max_partitions_per_insert_block=0" --data-binary "$1"
}

# the statement of each version; $1 table, $2 the window predicate
two_reads() {
	echo "SELECT (SELECT toJSONString(CAST((groupArray(d), groupArray(n)) AS Tuple(days Array(String), rows Array(UInt64))))" \
		"FROM (SELECT toString(toDate32(w)) AS d, count() AS n FROM $1 PREWHERE $2 GROUP BY d ORDER BY d))," \
		"(SELECT toJSONString(CAST((toString(minOrNull(w)), toString(maxOrNull(w)), countIf(NOT isNull(w)), countIf(isNull(w))) AS" \
		"Tuple(min Nullable(String), max Nullable(String), window_rows UInt64, null_window_rows UInt64)))" \
		"FROM (SELECT w AS w FROM $1 WHERE ($2) OR isNull(w)))"
}
one_read() {
	echo "SELECT toJSONString(CAST((arrayMap(x -> toString(x.1), _dpwin_days), arrayMap(x -> x.2, _dpwin_days))" \
		"AS Tuple(days Array(String), rows Array(UInt64))))," \
		"toJSONString(CAST((toString(_dpwin_min), toString(_dpwin_max), _dpwin_rows," \
		"(SELECT count() FROM $1 PREWHERE isNull(w))) AS" \
		"Tuple(min Nullable(String), max Nullable(String), window_rows UInt64, null_window_rows UInt64)))" \
		"FROM (SELECT arraySort(groupArray((assumeNotNull(_dpwin_d), _dpwin_n))) AS _dpwin_days," \
		"minOrNull(_dpwin_lo) AS _dpwin_min, maxOrNull(_dpwin_hi) AS _dpwin_max," \
		"sum(_dpwin_n) AS _dpwin_rows" \
		"FROM (SELECT toDate32(w) AS _dpwin_d, count() AS _dpwin_n, min(w) AS _dpwin_lo, max(w) AS _dpwin_hi" \
		"FROM $1 PREWHERE $2 GROUP BY _dpwin_d))"
}

# The benchmark's shapes (test/bench/bench.pl): a Nullable window column
# with a NULL in every 37th row; the 300-day table is ten 30-day copies with
# new ids, each shifted a further 30 days back, as the benchmark's bases are.
cols="(id Int64, w Nullable(DateTime64(6, 'UTC')), amount Nullable(Decimal(18, 2)), note Nullable(String))"
rows="SELECT number + k * 1000000000000 AS id,
	if(number % 37 = 5, NULL, toDateTime64('2026-01-01 00:00:00', 6, 'UTC') + toIntervalMicrosecond(number * 864000) - toIntervalDay(k * 30)),
	number / 7, concat('n', toString(number % 1000)) FROM numbers(3000000)"
if [ "$(ch "EXISTS TABLE $DB.day300")" != 1 ]; then
	echo "evidence_facts: making the tables" >&2
	ch "CREATE TABLE $DB.day30 $cols ENGINE = MergeTree PARTITION BY toYYYYMMDD(w) ORDER BY id
		SETTINGS allow_nullable_key = 1" >/dev/null
	ch "INSERT INTO $DB.day30 SELECT * FROM (WITH 0 AS k $rows)" >/dev/null
	ch "CREATE TABLE $DB.flat300 $cols ENGINE = MergeTree ORDER BY id" >/dev/null
	for k in $(seq 0 9); do
		ch "INSERT INTO $DB.flat300 SELECT * FROM (WITH $k AS k $rows)" >/dev/null
	done
	ch "CREATE TABLE $DB.day300 $cols ENGINE = MergeTree PARTITION BY toYYYYMMDD(w) ORDER BY id
		SETTINGS allow_nullable_key = 1" >/dev/null
	ch "INSERT INTO $DB.day300 SELECT * FROM $DB.flat300" >/dev/null
	for t in day30 day300 flat300; do
		ch "OPTIMIZE TABLE $DB.$t FINAL" >/dev/null
	done
fi

w7="w >= toDateTime64('2026-01-24 00:00:00', 6, 'UTC') AND w < toDateTime64('2026-01-31 00:00:00', 6, 'UTC')"
w30="w >= toDateTime64('2026-01-01 00:00:00', 6, 'UTC') AND w < toDateTime64('2026-01-31 00:00:00', 6, 'UTC')"

# The server's elapsed time of one statement, from its summary header;
# the answer goes to the file $2.  Without the query condition cache: it
# remembers which granules of a part matched a filter, so a statement run
# again skips what a refresh, reading a just-published table once, reads.
elapsed_ms() {
	curl -sS --fail-with-body -D - -o "$2" -u "$DPWIN_CH_USER:$DPWIN_CH_PASSWORD" \
		"$DPWIN_CH_URL/?use_query_condition_cache=0" --data-binary "$1" |
		sed -n 's/.*"elapsed_ns":"\([0-9]*\)".*/\1/p' | awk '{printf "%.1f", $1 / 1e6}'
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

printf '# %s UTC, commit %s, load %s\n' "$(date -u '+%Y-%m-%d %H:%M')" \
	"$(git -C "$ROOT" rev-parse --short HEAD)" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-22s %8s %8s %8s\n' case before after ratio
for c in "day30 7 $w7" "day30 30 $w30" "day300 7 $w7" "flat300 7 $w7"; do
	read -r tbl days pred <<<"$c"
	a=$(two_reads "$DB.$tbl" "$pred")
	b=$(one_read "$DB.$tbl" "$pred")
	ta=() tb=()
	for _ in $(seq "$ROUNDS"); do
		ta+=("$(elapsed_ms "$a" "$tmp/a")")
		tb+=("$(elapsed_ms "$b" "$tmp/b")")
		cmp -s "$tmp/a" "$tmp/b" || { echo "evidence_facts: the answers differ on $tbl, $days days" >&2; exit 1; }
	done
	ma=$(printf '%s\n' "${ta[@]}" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
	mb=$(printf '%s\n' "${tb[@]}" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
	printf '%-22s %8s %8s %8.2f\n' "$tbl, $days-day window" "$ma" "$mb" "$(echo "$mb / $ma" | bc -l)"
done
printf '# load at the end %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
