#!/usr/bin/env bash
#
# test/bench/statement_cost.sh — what one small statement costs the
# ClickHouse side in CPU, apart from the rows it moves (docs/benchmark.md,
# "What ClickHouse's one core carries").
#
# Needs a running sandbox (test/sandbox.sh start; DPWIN_SANDBOX_DIR and the
# ports as for the sandbox).  Each kind of statement below is sent SC_N
# times (default 200) over one kept-alive HTTP connection, as a refresh's
# connections send theirs, and the endpoint's CPU time (utime + stime of
# its process, /proc) is read before and after; the endpoint idles in
# between, and its idle CPU over as long a pause is printed with the
# results.  Each kind runs SC_ROUNDS times (default 3) in rotating order;
# the medians are printed, in ms of CPU and of wall time a statement:
#
#   select_1        SELECT 1: the floor of any statement
#   catalog         one row of system.tables by database and name, as
#                   admission's and the checks' statements read
#   parts           the active parts of one table from system.parts
#   create_drop     CREATE of a MergeTree table of the staging tables'
#                   shape, then its DROP ... SYNC (two statements: the
#                   figure is per statement)
#   insert_1        an INSERT of one row in RowBinary into that table
#
# Not part of CI.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
eval "$("$ROOT/test/sandbox.sh" env)"
N=${SC_N:-200}
ROUNDS=${SC_ROUNDS:-3}
DB=dpwin_bench_statements

# shellcheck source=test/bench/lib.sh
. "$ROOT/test/bench/lib.sh"

endpoint=$(cat "$DPWIN_SANDBOX_DIR/ch.pid")
tck=$(getconf CLK_TCK)
ticks() { cpu_ticks "$endpoint"; }

ch "CREATE DATABASE IF NOT EXISTS $DB" >/dev/null
ch "CREATE TABLE IF NOT EXISTS $DB.kept (id Int64, w DateTime64(6, 'UTC'), note String)
	ENGINE = MergeTree ORDER BY id" >/dev/null
ch "INSERT INTO $DB.kept VALUES (1, '2026-01-01 00:00:00', 'a')" >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01a' >"$work/row.bin"

echo "SELECT 1" >"$work/select_1.sql"
echo "SELECT uuid, engine, metadata_modification_time FROM system.tables WHERE database = '$DB' AND name = 'kept'" >"$work/catalog.sql"
echo "SELECT name, rows, hash_of_all_files FROM system.parts WHERE database = '$DB' AND table = 'kept' AND active" >"$work/parts.sql"
echo "CREATE TABLE $DB.s (id Int64, w DateTime64(6, 'UTC'), note String) ENGINE = MergeTree ORDER BY id" >"$work/create.sql"
echo "DROP TABLE $DB.s SYNC" >"$work/drop.sql"
request_options "" "$work/select_1.sql" >"$work/select_1.req"
request_options "" "$work/catalog.sql" >"$work/catalog.req"
request_options "" "$work/parts.sql" >"$work/parts.req"
{ request_options "" "$work/create.sql"; echo next; request_options "" "$work/drop.sql"; } >"$work/create_drop.req"
request_options "query=INSERT%20INTO%20$DB.kept%20FORMAT%20RowBinary" "$work/row.bin" >"$work/insert_1.req"

names=(select_1 catalog parts create_drop insert_1)
declare -A per n_of cpu wall
n_of=([select_1]=$N [catalog]=$N [parts]=$N [create_drop]=$((N / 2)) [insert_1]=$N)
per=([select_1]=1 [catalog]=1 [parts]=1 [create_drop]=2 [insert_1]=1)
for n in "${names[@]}"; do
	repeat_options "${n_of[$n]}" "$work/$n.req" >"$work/$n.cfg"
done

idle_ms=()
for ((r = 0; r < ROUNDS; r++)); do
	for ((i = 0; i < ${#names[@]}; i++)); do
		n=${names[$(((i + r) % ${#names[@]}))]}
		c0=$(ticks)
		t0=$(date +%s%N)
		curl -K "$work/$n.cfg"
		t1=$(date +%s%N)
		c1=$(ticks)
		k=$((n_of[$n] * per[$n]))
		cpu[$n]="${cpu[$n]:-} $(awk -v d=$((c1 - c0)) -v t="$tck" -v k=$k 'BEGIN {printf "%.3f", d * 1000 / t / k}')"
		wall[$n]="${wall[$n]:-} $(awk -v d=$((t1 - t0)) -v k=$k 'BEGIN {printf "%.3f", d / 1e6 / k}')"
		# The endpoint's own CPU while nothing is sent, over as long.
		c0=$(ticks)
		sleep "$(awk -v d=$((t1 - t0)) 'BEGIN {printf "%.3f", d / 1e9}')"
		c1=$(ticks)
		idle_ms+=("$(awk -v d=$((c1 - c0)) -v t="$tck" -v s=$((t1 - t0)) 'BEGIN {printf "%.1f", d * 1000 / t / (s / 1e9)}')")
	done
done
ch "DROP DATABASE $DB SYNC" >/dev/null

printf '# %d statements a kind over one connection, %d rounds, load %s; medians, ms a statement\n' \
	"$N" "$ROUNDS" "$(cut -d' ' -f1-3 /proc/loadavg)"
# shellcheck disable=SC2068
printf '# the endpoint idle: %s ms of CPU a second (median)\n' "$(median ${idle_ms[@]})"
printf '%-12s %8s %8s\n' kind cpu wall
for n in "${names[@]}"; do
	# shellcheck disable=SC2086
	printf '%-12s %8s %8s\n' "$n" "$(median ${cpu[$n]})" "$(median ${wall[$n]})"
done
