#!/usr/bin/env bash
#
# test/bench/netcheck.sh — is the delay proxy (test/bench/netdelay.c) a
# bottleneck?  With the benchmark's sandbox running (BENCH_KEEP_SANDBOX=1
# test/bench/run.sh once), moves the same bytes directly and through the
# proxy at a round trip of 0 ms, interleaved NETCHECK_RUNS [5] times:
#   - ClickHouse: an HTTP answer of NETCHECK_MB [200] MB (curl);
#   - PostgreSQL: a COPY of the 7-day window, binary (psql | wc -c), as the
#     benchmark's serial COPY limit;
#   - the round trip of one small statement (SELECT 1), 50 in a row, and
#     the same through a proxy of NETCHECK_RTT [20] ms.
# Prints seconds and MB/s of each; docs/benchmark.md quotes one run.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${BENCH_OUT:-$ROOT/test/bench/out}
export DPWIN_SANDBOX_DIR=${DPWIN_SANDBOX_DIR:-$OUT/sb}
RUNS=${NETCHECK_RUNS:-5}
MB=${NETCHECK_MB:-200}
RTT=${NETCHECK_RTT:-20}
TAG="r${NETCHECK_ROWS_PER_DAY:-100000}_d${NETCHECK_SOURCE_DAYS:-30}"
# shellcheck disable=SC1091
. "$DPWIN_SANDBOX_DIR/env"
cc -O2 -Wall -pthread -o "$OUT/netdelay" "$ROOT/test/bench/netdelay.c"

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
trap 'exit 1' INT TERM
proxy() {	# proxy TARGET RTT: prints the port
	local pf="$OUT/.netcheck.$$.${#pids[@]}"
	"$OUT/netdelay" proxy "$1" "$2" "$pf" >/dev/null 2>&1 &
	pids+=($!)
	while ! grep -q '^[0-9]' "$pf" 2>/dev/null; do sleep 0.05; done
	cat "$pf"
	rm -f "$pf"
}
chport=${DPWIN_CH_URL##*:}
ch0=$(proxy "$chport" 0)
pg0=$(proxy "$PGPORT" 0)
chr=$(proxy "$chport" "$RTT")

end=$(psql -X -A -t -c "SELECT max(w)::date + 1 FROM bench_$TAG.events")
copy="COPY (SELECT id, w, amount, note, qty, flag FROM bench_$TAG.events WHERE w >= date '$end' - 7 AND w < date '$end') TO STDOUT (FORMAT binary)"
q="SELECT repeat('x', 1000) FROM numbers($((MB * 1000))) FORMAT RowBinary"
t() { local a b; a=$(date +%s.%N); "$@" >/dev/null; b=$(date +%s.%N); echo "$a $b" | awk '{ printf "%.3f", $2 - $1 }'; }
chget() { curl -sS -u "$DPWIN_CH_USER:$DPWIN_CH_PASSWORD" "http://127.0.0.1:$1/" --data-binary "$q" -o /dev/null; }
pgcopy() { psql -X -q -h "$1" -p "$2" -c "$copy" | wc -c; }
small() { for _ in $(seq 50); do curl -sS -u "$DPWIN_CH_USER:$DPWIN_CH_PASSWORD" "http://127.0.0.1:$1/" --data-binary 'SELECT 1' -o /dev/null; done; }
bytes=$(psql -X -q -c "$copy" | wc -c)
printf 'netcheck: %s; load %s; %d runs; ClickHouse answer %d MB, COPY %d bytes\n' "$(date -u '+%F %H:%M UTC')" \
	"$(cut -d' ' -f1-3 /proc/loadavg)" "$RUNS" "$MB" "$bytes"
if command -v socat >/dev/null; then
	sinkport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	socat -u "TCP-LISTEN:$sinkport,reuseaddr,fork" OPEN:/dev/null &
	pids+=($!)
	sleep 0.3
	raw0=$(proxy "$sinkport" 0)
	raw() { head -c "$((${NETCHECK_RAW_MB:-1000} * 1048576))" /dev/zero | socat -u - "TCP:127.0.0.1:$1"; }
	for i in $(seq "$RUNS"); do
		printf 'raw %d MB, run %d: direct %s s, through the proxy %s s\n' "${NETCHECK_RAW_MB:-1000}" "$i" "$(t raw "$sinkport")" "$(t raw "$raw0")"
	done
fi
printf '%-4s %10s %10s %10s %10s %12s %12s %14s\n' run ch_direct ch_proxy pg_direct pg_proxy 50xSELECT1 50x_proxy0 "50x_proxy$RTT"
for i in $(seq "$RUNS"); do
	printf '%-4s %10s %10s %10s %10s %12s %12s %14s\n' "$i" "$(t chget "$chport")" "$(t chget "$ch0")" \
		"$(t pgcopy "$PGHOST" "$PGPORT")" "$(t pgcopy 127.0.0.1 "$pg0")" "$(t small "$chport")" "$(t small "$ch0")" "$(t small "$chr")"
done
