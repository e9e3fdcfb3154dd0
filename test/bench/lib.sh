# test/bench/lib.sh — helpers of the benchmark's shell scripts (sourced by
# profile.sh, extraction.sh, timeline.sh, cut_delete.sh, digest_cost.sh,
# statement_cost.sh, check_cost.sh, bodies.sh, clone_merge.sh and
# format_cost.sh once the sandbox's env is loaded and DB names the
# ClickHouse database they work in).

# One statement to the endpoint, waiting for its end; fails on an error.
ch() {
	curl -sS --fail-with-body -u "$DPWIN_CH_USER:$DPWIN_CH_PASSWORD" \
		"$DPWIN_CH_URL/?wait_end_of_query=1" --data-binary "$1"
}
pgq() { psql -X -q -A -t -v ON_ERROR_STOP=1 -c "$1"; }

# The columns of the benchmark's events in ClickHouse, and a SELECT of N of
# them from 2026-01-01 00:00 UTC on, one every 0.864 s (a million rows make
# ten days), the window value NULL in every 37th, as the bases of
# test/bench/bench.pl are.
EVENT_COLS="(id Int64, w Nullable(DateTime64(6, 'UTC')), amount Nullable(Decimal(18, 2)), note Nullable(String), qty Int32, flag Bool)"
event_rows() {
	echo "SELECT number,
		if(number % 37 = 5, NULL, toDateTime64('2026-01-01 00:00:00', 6, 'UTC') + toIntervalMicrosecond(number * 864000)),
		number / 7, concat('n', toString(number % 1000)), toInt32(number % 100), number % 3 = 0
		FROM numbers($1)"
}

# The median of the arguments (the upper one of an even count).
median() {
	printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'
}

# clone_base TABLE BASE: TABLE becomes a clone of BASE, partition by
# partition (hard links), as the benchmark's targets are.
clone_base() {
	local t=$1 base=$2
	ch "DROP TABLE IF EXISTS $DB.$t SYNC"
	ch "CREATE TABLE $DB.$t AS $DB.$base"
	ch "ALTER TABLE $DB.$t $(ch "SELECT arrayStringConcat(groupArray(concat('ATTACH PARTITION ID ''', partition_id, ''' FROM $DB.$base')), ', ') FROM (SELECT DISTINCT partition_id FROM system.parts WHERE database = '$DB' AND table = '$base' AND active) FORMAT TSVRaw")"
}

# Drop what refreshes leave behind: backups, and tables of failed runs.
drop_backups() {
	local t
	for t in $(ch "SELECT name FROM system.tables WHERE database = '$DB' AND startsWith(name, '_dpwin_')"); do
		ch "DROP TABLE $DB.\`$t\` SYNC"
	done
}

# Wait until the server runs no merge in the database.
settle() {
	while [ "$(ch "SELECT count() FROM system.merges WHERE database = '$DB'")" != 0 ]; do sleep 0.1; done
}

# The CPU time (utime + stime, in clock ticks) of process $1 so far: the
# endpoint's, read around the statements whose cost a script measures.
cpu_ticks() {
	awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$1/stat"
}

# curl options (for `curl -K`) of one request to the endpoint: query string
# $1 after /?, the body from file $2.
request_options() {
	printf 'url = "%s/?%s"\nuser = "%s:%s"\ndata-binary = "@%s"\nsilent\nfail-with-body\noutput = "/dev/null"\n' \
		"$DPWIN_CH_URL" "$1" "$DPWIN_CH_USER" "$DPWIN_CH_PASSWORD" "$2"
}

# The requests of file $2 (request_options, several joined by "next") $1
# times, as one `curl -K` config: curl sends them over one kept-alive
# connection, as a refresh's connections send theirs.
repeat_options() {
	local i
	for ((i = 0; i < $1; i++)); do
		[ "$i" -gt 0 ] && echo next
		cat "$2"
	done
}
