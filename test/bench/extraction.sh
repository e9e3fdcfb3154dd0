#!/usr/bin/env bash
#
# test/bench/extraction.sh — compares configurations of one refresh, with
# the runs interleaved.
#
#   test/bench/extraction.sh RUNS LABEL=COMMAND [LABEL=COMMAND ...]
#
# Needs the benchmark's sandbox with its dataset (as profile.sh).  Makes a
# route on a fresh clone of the day-partitioned 30-day base (7-day window
# ending at the source's last midnight, 1-day chunks, parallelism
# EXTRACTION_PARALLELISM [2]), refreshes it once unmeasured, then RUNS
# times: for each configuration in turn, runs COMMAND (a shell command:
# psql against the sandbox, a file a test build looks for, ...), clones
# the base again, waits for merges, and refreshes, printing stage_seconds
# and the wall time.  Ends with the median of each.  Example:
#
#   test/bench/extraction.sh 7 \
#     4MB="psql -qc \"SELECT dpwin.alter_route('xtr', max_encoded_bytes => 4194304)\"" \
#     16MB="psql -qc \"SELECT dpwin.alter_route('xtr', max_encoded_bytes => 16777216)\""
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${BENCH_OUT:-$ROOT/test/bench/out}
export DPWIN_SANDBOX_DIR=${DPWIN_SANDBOX_DIR:-$OUT/sb}
TAG="r${PROFILE_ROWS_PER_DAY:-100000}_d${PROFILE_SOURCE_DAYS:-70}"
DB=bench_$TAG
PAR=${EXTRACTION_PARALLELISM:-2}
log() { printf 'extraction: %s\n' "$*" >&2; }

[ $# -ge 2 ] || { sed -n '3,21p' "$0" >&2; exit 2; }
RUNS=$1
shift
[ -f "$DPWIN_SANDBOX_DIR/env" ] || { log "no benchmark sandbox in $DPWIN_SANDBOX_DIR"; exit 1; }
# shellcheck disable=SC1091
. "$DPWIN_SANDBOX_DIR/env"
# shellcheck source=test/bench/lib.sh
. "$ROOT/test/bench/lib.sh"
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

end=$(pgq "SELECT to_char(max(w)::date + 1, 'YYYY-MM-DD') FROM bench_$TAG.events")
clone_base t_xtr base_day_30
pgq "SELECT dpwin.drop_route('xtr') FROM dpwin.route WHERE route_name = 'xtr';
	SELECT dpwin.create_route('xtr', 'bench_$TAG.events', 'w', 'sandbox_ch', '$DB', 't_xtr',
		interval '7 days', interval '1 day', parallelism => $PAR)" >/dev/null
pgq "SELECT state FROM dpwin_refresh('xtr', '$end 00:00:00+00')" >/dev/null
log="$OUT/extraction.log"
: >"$log"
for i in $(seq 1 "$RUNS"); do
	for cfg in "$@"; do
		label=${cfg%%=*}
		bash -c "${cfg#*=}" >/dev/null
		drop_backups
		clone_base t_xtr base_day_30
		settle
		s=$(date +%s%N)
		st=$(pgq "SELECT details->'evidence'->'phases'->>'stage_seconds' FROM dpwin_refresh('xtr', '$end 00:00:00+00')")
		e=$(date +%s%N)
		printf '%s run %d stage %.3f wall %.3f\n' "$label" "$i" "$st" "$(echo "($e - $s) / 1000000000" | bc -l)" | tee -a "$log"
	done
done
echo "== medians of $RUNS runs, parallelism $PAR"
for cfg in "$@"; do
	label=${cfg%%=*}
	printf '%s: stage %s s, wall %s s\n' "$label" \
		"$(awk -v l="$label" '$1 == l {print $5}' "$log" | median)" \
		"$(awk -v l="$label" '$1 == l {print $7}' "$log" | median)"
done
drop_backups
ch "DROP TABLE IF EXISTS $DB.t_xtr SYNC"
pgq "SELECT dpwin.drop_route('xtr')" >/dev/null
