#!/usr/bin/env bash
#
# test/demo.sh — the main job, end to end, on a fresh machine: install what
# is missing, build, start the sandbox, declare a sample route and refresh
# one window of it into ClickHouse, printing each step's result.
#
# DPWIN_PG selects the PostgreSQL major (15 by default; 17, 18 or 19), as
# for test/sandbox.sh.  The sandbox keeps running afterwards (test/sandbox.sh
# stop ends it), so the result can be explored with psql:
# eval "$(test/sandbox.sh env)".
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

# DPWIN_DEMO_ENV=1: run against the PostgreSQL and ClickHouse that the
# environment names (PG*, DPWIN_CH_URL, DPWIN_CH_USER, DPWIN_CH_PASSWORD,
# with a foreign server sandbox_ch), as test/pkg/check.sh does for an
# installed package, instead of starting the sandbox.
if [ "${DPWIN_DEMO_ENV:-}" != 1 ]; then
	test/sandbox.sh start
	eval "$(test/sandbox.sh env)"
fi

ch() {
	curl -sS --fail-with-body -u "$DPWIN_CH_USER:$DPWIN_CH_PASSWORD" \
		"$DPWIN_CH_URL/" --data-binary "$1"
}

step() { printf '\n== %s\n' "$*"; }

step "The sandbox's PostgreSQL (DPWIN_PG=${DPWIN_PG:-15}) and dpwin"
psql -X -c "SELECT version() AS postgresql, extversion AS dpwin FROM pg_extension WHERE extname = 'dpwin'"

step "PostgreSQL source: public.demo_events, 14 days x 2,000 rows, a few NULL windows and duplicates"
psql -X -q -v ON_ERROR_STOP=1 <<'SQL'
DROP TABLE IF EXISTS public.demo_events;
CREATE TABLE public.demo_events (
	id			bigint NOT NULL,
	observed_at	timestamptz,
	amount		numeric(18,2),
	note		text
);
INSERT INTO public.demo_events
SELECT g,
	   CASE WHEN g % 97 = 0 THEN NULL
			ELSE timestamptz '2026-08-27 00:00:00+00' + (g % 28000) * interval '43.2 seconds' END,
	   round((g % 100000) / 7.0, 2),
	   'event ' || g
  FROM generate_series(1, 28000) g;
INSERT INTO public.demo_events SELECT * FROM public.demo_events WHERE id % 500 = 1;
SELECT count(*) AS source_rows,
	   count(*) FILTER (WHERE observed_at >= '2026-09-02' AND observed_at < '2026-09-09') AS in_window
  FROM public.demo_events;
SQL

step "ClickHouse target: demo.events (Atomic database, plain MergeTree), holding an old generation"
ch "CREATE DATABASE IF NOT EXISTS demo ENGINE = Atomic"
ch "DROP TABLE IF EXISTS demo.events"
ch "CREATE TABLE demo.events (id Int64, observed_at Nullable(DateTime64(6, 'UTC')), amount Nullable(Decimal(18, 2)), note Nullable(String)) ENGINE = MergeTree ORDER BY id"
ch "INSERT INTO demo.events VALUES (-1, '2026-08-01 00:00:00', 1.00, 'outside the window: kept'), (-2, NULL, 2.00, 'NULL window: kept'), (-3, '2026-09-05 12:00:00', 3.00, 'inside the window: replaced')"
ch "SELECT count() AS rows, uuid FROM demo.events, system.tables WHERE database = 'demo' AND name = 'events' GROUP BY uuid FORMAT PrettyCompactMonoBlock"

step "The route: 7-day lookback, 1-day chunks, 2 parallel workers"
psql -X -q -v ON_ERROR_STOP=1 <<'SQL'
SELECT dpwin.drop_route('demo_events') FROM dpwin.routes WHERE route_name = 'demo_events';
SELECT dpwin.create_route('demo_events', 'public.demo_events', 'observed_at',
						  'sandbox_ch', 'demo', 'events',
						  lookback => '7 days', chunk_interval => '1 day',
						  parallelism => 2) AS route_id;
SELECT * FROM dpwin.plan('demo_events', '2026-09-09 00:00:00+00');
SQL

step "SELECT * FROM dpwin_refresh('demo_events', '2026-09-09 00:00:00+00')"
psql -X -v ON_ERROR_STOP=1 -x -c \
	"SELECT invocation_id, state, window_lo, window_hi, chunks, source_rows, staged_rows, final_rows, generation_table, backup_table, jsonb_pretty(details->'evidence'->'phases') AS phases FROM dpwin_refresh('demo_events', '2026-09-09 00:00:00+00')"

step "The published target: the window replaced, the rest kept; the old generation kept as a backup"
ch "SELECT countIf(observed_at >= '2026-09-02' AND observed_at < '2026-09-09') AS window_rows, countIf(observed_at IS NULL) AS null_window_rows, countIf(id < 0) AS old_rows, count() AS total FROM demo.events FORMAT PrettyCompactMonoBlock"
# count(), not system.tables.total_rows: total_rows also counts the rows a
# lightweight DELETE has masked, which no reader sees
for t in $(ch "SELECT name FROM system.tables WHERE database = 'demo' ORDER BY name FORMAT TSVRaw"); do
	ch "SELECT '$t' AS table, toString(any(t.uuid)) AS uuid, (SELECT count() FROM demo.\`$t\`) AS rows
		FROM system.tables t WHERE t.database = 'demo' AND t.name = '$t' FORMAT PrettyCompactMonoBlock"
done

step "The journal"
psql -X -c "SELECT route_name, state, publication_outcome, chunks, chunks_verified, duration FROM dpwin.invocations ORDER BY created_at DESC LIMIT 3"

printf '\nThe sandbox is still running: eval "$(test/sandbox.sh env)" to explore, test/sandbox.sh stop to end it.\n'
