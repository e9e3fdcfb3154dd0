#!/usr/bin/env bash
#
# test/bench/timeline.sh — where a whole refresh spends its wall time
# (docs/benchmark.md, "Where the time goes").
#
# Needs the benchmark's sandbox running with its dataset (run
# `BENCH_KEEP_SANDBOX=1 test/bench/run.sh` once).  For every target named
# on the command line (shape_days: day_30, month_30, flat_30, day_300, ...;
# default day_30 month_30 flat_30 day_300), clones the base into a scratch
# target, makes a route of a 7-day window (1-day chunks, parallelism
# TIMELINE_PARALLELISM [2]), runs one unmeasured refresh, then
# TIMELINE_RUNS [3] measured ones, and prints for the median one:
#   - every statement the endpoint received, with its arrival time in ms
#     from the psql call (the endpoint's query log, docs/endpoint.md);
#   - the phases that follow from it: start (from the call reaching the
#     session to the first statement: the coordinator's start, the plan,
#     the snapshot), admission (the statements before the first
#     staging table), extraction (to the last staging digest), build and
#     checks (to the EXCHANGE), and the rest (backup, evidence, cleanup).
# `skip_30` (`skip_300`) as a target measures a `skip_unchanged` refresh of
# a 30-day lookback in which one day changed, on the day-partitioned
# 30-day (300-day) base: a different day each run, or, with
# TIMELINE_SKIP_NEWEST=1, the newest.
# TIMELINE_END=13:37 ends the window at that time of the day before the
# source's last midnight, as the benchmark's second window end does (a
# window that cuts two days); the default is the last midnight.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${BENCH_OUT:-$ROOT/test/bench/out}
export DPWIN_SANDBOX_DIR=${DPWIN_SANDBOX_DIR:-$OUT/sb}
RUNS=${TIMELINE_RUNS:-3}
PAR=${TIMELINE_PARALLELISM:-2}
TAG="r${TIMELINE_ROWS_PER_DAY:-100000}_d${TIMELINE_SOURCE_DAYS:-70}"
DB=bench_$TAG
log() { printf 'timeline: %s\n' "$*" >&2; }

[ -f "$DPWIN_SANDBOX_DIR/env" ] || { log "no benchmark sandbox in $DPWIN_SANDBOX_DIR"; exit 1; }
# shellcheck disable=SC1091
. "$DPWIN_SANDBOX_DIR/env"

# shellcheck source=test/bench/lib.sh
. "$ROOT/test/bench/lib.sh"

route() {
	local source=$1 lookback=$2 skip=$3
	pgq "SELECT dpwin.drop_route('tl') FROM dpwin.route WHERE route_name = 'tl';
		SELECT dpwin.create_route('tl', '$source', 'w', 'sandbox_ch', '$DB', 't_tl',
			interval '$lookback', interval '1 day', parallelism => $PAR,
			skip_unchanged => $skip)" >/dev/null
}

[ "$(ch "SELECT count() FROM system.tables WHERE database = '$DB' AND name = 'base_day_30'")" = 1 ] ||
	{ log "no $DB.base_day_30: run the benchmark first"; exit 1; }
end_time=${TIMELINE_END:-00:00}
case "$end_time" in
00:00) end=$(pgq "SELECT to_char(max(w)::date + 1, 'YYYY-MM-DD') FROM bench_$TAG.events") ;;
*) end=$(pgq "SELECT to_char(max(w)::date, 'YYYY-MM-DD') FROM bench_$TAG.events") ;;
esac

# One measured refresh: prints "wall_ms<TAB>phases" and leaves the
# endpoint's log lines it caused in $1.
# The times are the session's own clock (the machine's) around the call, as
# the benchmark reads them: psql's start and connection are not the call's.
measure() {
	local lines=$1 k t0 t1 phases out
	k=$(curl -sS "$DPWIN_CH_CONTROL_URL/log" | tail -1 | cut -f1)
	out=$(psql -X -q -A -t -v ON_ERROR_STOP=1 <<-EOF
		SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
		SELECT details->'evidence'->'phases' FROM dpwin_refresh('tl', '$end $end_time:00+00');
		SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
	EOF
	)
	t0=$(sed -n 1p <<<"$out")
	phases=$(sed -n 2p <<<"$out")
	t1=$(sed -n 3p <<<"$out")
	curl -sS "$DPWIN_CH_CONTROL_URL/log?since=${k:-0}" |
		awk -F'\t' -v t0="$t0" '{ printf "%d\t%s\t%s\n", $2 - t0, $5, $6 }' >"$lines"
	printf '%d\t%s\n' $((t1 - t0)) "$phases"
}

# Phase boundaries from the statements (arrival times, ms).
phases() {
	local lines=$1 wall=$2
	awk -F'\t' -v wall="$wall" '
		NR == 1 { first = $1 }
		$3 ~ /_stg_/ && stage == "" { stage = $1 }
		$3 ~ /^SELECT count\(\), sum\((sipHash64Keyed|reinterpretAsUInt64\(sipHash128ReferenceKeyed)/ && $3 ~ /_stg_/ { digest = $1 }
		$3 ~ /^EXCHANGE TABLES/ && $3 !~ /_dpwin_probe_/ { exch = $1 }
		{ n++ }
		END {
			if (stage == "") stage = first
			if (digest == "") digest = stage
			printf "  statements %d; start %d ms, admission %d ms, extraction %d ms, build and checks %d ms, after the EXCHANGE %d ms (wall %d ms)\n",
				n, first, stage - first, digest - stage, exch - digest, wall - exch, wall
		}' "$lines"
}

run_target() {
	local name=$1 base source lookback skip=false
	case "$name" in
	skip_*)
		base=base_day_${name#skip_} source=bench_$TAG.events_tl lookback='30 days' skip=true
		pgq "DROP TABLE IF EXISTS bench_$TAG.events_tl;
			CREATE TABLE bench_$TAG.events_tl (LIKE bench_$TAG.events INCLUDING ALL);
			INSERT INTO bench_$TAG.events_tl SELECT * FROM bench_$TAG.events
				WHERE w >= '$end'::date - 30" 2>/dev/null
		pgq "VACUUM ANALYZE bench_$TAG.events_tl"
		;;
	*) base=base_$name source=bench_$TAG.events lookback='7 days' ;;
	esac
	[ "$(ch "SELECT count() FROM system.tables WHERE database = '$DB' AND name = '$base'")" = 1 ] ||
		{ log "no $DB.$base: run the benchmark with this size first"; return; }
	clone_base t_tl "$base"
	route "$source" "$lookback" "$skip"
	pgq "SELECT state FROM dpwin_refresh('tl', '$end $end_time:00+00')" >/dev/null
	drop_backups
	settle
	local runs=() i r
	for i in $(seq 1 "$RUNS"); do
		if [ "${name%_*}" = skip ]; then
			local back=$((i * 7 % 30))
			[ "${TIMELINE_SKIP_NEWEST:-0}" = 1 ] && back=0
			pgq "UPDATE bench_$TAG.events_tl SET qty = coalesce(qty, 0) + 1
				WHERE w >= '$end'::date - $((back + 1)) AND w < '$end'::date - $back"
		fi
		r=$(measure "$OUT/timeline.$i")
		runs+=("${r%%	*} $i")
		echo "  run $i: wall ${r%%	*} ms, ${r#*	}"
		drop_backups
		settle
	done
	# the median run by wall time
	local med
	med=$(printf '%s\n' "${runs[@]}" | sort -n | sed -n "$(((RUNS + 1) / 2))p")
	echo "  median run ${med#* }:"
	phases "$OUT/timeline.${med#* }" "${med%% *}"
	awk -F'\t' '{ printf "  %6d %s %.110s\n", $1, $2, $3 }' "$OUT/timeline.${med#* }"
	rm -f "$OUT"/timeline.*
	ch "DROP TABLE IF EXISTS $DB.t_tl SYNC"
	pgq "SELECT dpwin.drop_route('tl')" >/dev/null
	[ "${name%_*}" != skip ] || pgq "DROP TABLE bench_$TAG.events_tl"
}

[ $# -gt 0 ] || set -- day_30 month_30 flat_30 day_300
echo "# test/bench/timeline.sh $* (window end $end_time): $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$ROOT" rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
for t in "$@"; do
	echo "== $t"
	run_target "$t"
done
echo "# load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
