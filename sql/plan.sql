-- Window planning: dpwin.plan_window() and dpwin.plan(route, interval_end).
-- Exact integer microsecond arithmetic, independent of the session's
-- TimeZone and DateStyle; no wall-clock fallback.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dpwin;
RESET client_min_messages;
\set SHOW_CONTEXT never
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
SET IntervalStyle = 'postgres';

CREATE FUNCTION pg_temp.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- The seeds' example: at 2026-09-09T00:00:00Z, 7 days in 1-day chunks select
-- [2026-09-02T00:00:00Z, 2026-09-09T00:00:00Z) in 7 chunks.
SELECT * FROM dpwin.plan_window('2026-09-09T00:00:00Z', '7 days', '1 day');
SELECT min(lo) AS window_lo, max(hi) AS window_hi, count(*) AS chunks
  FROM dpwin.plan_window('2026-09-09T00:00:00Z', 'P7D', 'P1D');

-- lookback not a multiple of the chunk: the last chunk is shorter
SELECT chunk_no, lo, hi, hi - lo AS length
  FROM dpwin.plan_window('2026-09-09T00:00:00Z', '7 days', '2 days');
-- chunks equal to the lookback: one chunk
SELECT * FROM dpwin.plan_window('2026-09-09T00:00:00Z', '6 hours', '6 hours');
-- microsecond precision at both ends
SELECT chunk_no, lo, hi, hi - lo AS length
  FROM dpwin.plan_window('2026-09-09T00:00:00.000001Z', '1 second', '333333 microseconds');
SELECT * FROM dpwin.plan_window('2026-09-09T12:34:56.789012+00', '00:00:00.000003', '00:00:00.000001');
-- a day is 24 hours, mixed units are summed: 1 day 2 hours = 26 hours
SELECT count(*), min(lo), max(hi)
  FROM dpwin.plan_window('2026-09-09T00:00:00Z', '1 day 2 hours', '1 hour');
SELECT count(*), min(lo), max(hi)
  FROM dpwin.plan_window('2026-09-09T00:00:00Z', '2 days -1 hour', '47 hours');

-- Chunks partition the window: contiguous, no gaps, no overlaps, and
-- together exactly [interval_end - lookback, interval_end).
WITH c AS (
	SELECT * FROM dpwin.plan_window('2026-03-29T01:30:00.5+02', '10 days 3 hours 7.25 seconds', '17 hours 3 minutes')
)
SELECT count(*) AS chunks,
	   bool_and(lo < hi) AS nonempty,
	   bool_and(hi = lead_lo OR lead_lo IS NULL) AS contiguous,
	   bool_and(chunk_no = rn - 1) AS numbered,
	   min(lo) = '2026-03-29T01:30:00.5+02'::timestamptz - interval '10 days 3 hours 7.25 seconds' AS starts_right,
	   max(hi) = '2026-03-29T01:30:00.5+02'::timestamptz AS ends_right
  FROM (SELECT c.*, lead(lo) OVER (ORDER BY chunk_no) AS lead_lo,
			   row_number() OVER (ORDER BY chunk_no) AS rn FROM c) s;

-- The same instants whatever the session's TimeZone and DateStyle: across a
-- daylight saving change (America/St_Johns, UTC-02:30/-03:30) and with a
-- day-first DateStyle, the epochs are identical to the UTC ones.
CREATE TEMP TABLE plan_utc AS
	SELECT chunk_no, extract(epoch FROM lo) AS lo, extract(epoch FROM hi) AS hi
	  FROM dpwin.plan_window('2026-11-02T00:00:00Z', '3 days', '1 day');
SET TimeZone = 'America/St_Johns';
SET DateStyle = 'SQL, DMY';
SET IntervalStyle = 'iso_8601';
SELECT chunk_no, extract(epoch FROM lo) AS lo, extract(epoch FROM hi) AS hi
  FROM dpwin.plan_window('2026-11-02T00:00:00Z', 'P3D', 'P1D');
SELECT count(*) AS same_as_utc
  FROM dpwin.plan_window('2026-11-02T00:00:00Z', '3 days', '1 day') p
  JOIN plan_utc u USING (chunk_no)
 WHERE extract(epoch FROM p.lo) = u.lo AND extract(epoch FROM p.hi) = u.hi;
-- every chunk is 86400 s long although the local day of 2026-11-01 is 25 h
SELECT chunk_no, extract(epoch FROM hi - lo) AS seconds FROM dpwin.plan_window('2026-11-02T00:00:00Z', '3 days', '1 day');
RESET TimeZone;
RESET DateStyle;
RESET IntervalStyle;
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
SET IntervalStyle = 'postgres';
DROP TABLE plan_utc;

-- Bad inputs
-- no wall-clock fallback
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window(NULL, '7 days', '1 day')$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('2026-09-09T00:00:00Z', NULL, '1 day')$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('2026-09-09T00:00:00Z', '7 days', NULL)$$);
-- calendar months and years have no fixed length
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('2026-09-09T00:00:00Z', '1 month', '1 day')$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('2026-09-09T00:00:00Z', '1 year', '1 day')$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('2026-09-09T00:00:00Z', 'P1Y2D', '1 day')$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('2026-09-09T00:00:00Z', '60 days', '1 mon')$$);
-- not positive
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('2026-09-09T00:00:00Z', '0', '1 day')$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('2026-09-09T00:00:00Z', '-7 days', '1 day')$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('2026-09-09T00:00:00Z', '1 day -25 hours', '1 hour')$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('2026-09-09T00:00:00Z', '1 day', '0 seconds')$$);
-- the chunk may not be longer than the lookback
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('2026-09-09T00:00:00Z', '1 day', '25 hours')$$);
-- too many chunks
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('2026-09-09T00:00:00Z', '10001 seconds', '1 second')$$);
SELECT count(*) FROM dpwin.plan_window('2026-09-09T00:00:00Z', '10000 seconds', '1 second');
-- outside the timestamp range
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('infinity', '1 day', '1 day')$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('-infinity', '1 day', '1 day')$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('4714-11-25 00:00:00+00 BC', '2 days', '1 day')$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('2026-09-09T00:00:00Z', '2147483647 days', '1 day')$$);
-- the lower edge itself is fine
SELECT * FROM dpwin.plan_window('4714-11-25 00:00:00+00 BC', '1 day', '1 day');

-- dpwin.plan(route, interval_end) uses the route's lookback and chunks
CREATE TABLE plan_events (id bigint, observed_at timestamptz);
CREATE SERVER plan_ch FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://127.0.0.1:8123');
SELECT dpwin.create_route('plan_r', 'plan_events', 'observed_at', 'plan_ch',
						  'analytics', 'events', '7 days', '36 hours') > 0 AS created;
SELECT * FROM dpwin.plan('plan_r', '2026-09-09T00:00:00Z');
-- an untyped literal resolves to the timestamptz version (the preferred type)
SELECT count(*) FROM dpwin.plan('plan_r', '2026-09-09 00:00:00+00');
SELECT min(lo), max(hi) FROM dpwin.plan('plan_r', '2026-09-09');
-- planning shows the source: SELECT on it is checked before it is locked
CREATE ROLE dpwin_plan_nobody;
SET ROLE dpwin_plan_nobody;
SELECT pg_temp.try($$SELECT count(*) FROM dpwin.plan('plan_r', '2026-09-09T00:00:00Z')$$);
RESET ROLE;
GRANT SELECT ON plan_events TO dpwin_plan_nobody;
SET ROLE dpwin_plan_nobody;
SELECT count(*) FROM dpwin.plan('plan_r', '2026-09-09T00:00:00Z');
RESET ROLE;
REVOKE SELECT ON plan_events FROM dpwin_plan_nobody;
DROP ROLE dpwin_plan_nobody;
-- no wall-clock fallback, and no naive timestamps
SELECT pg_temp.try($$SELECT * FROM dpwin.plan('plan_r', NULL)$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan('plan_r', NULL::timestamptz)$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan(NULL, '2026-09-09T00:00:00Z')$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan('plan_r', '2026-09-09 00:00'::timestamp)$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan('plan_r', localtimestamp)$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan('plan_r', '2026-09-09'::date)$$);
-- with their detail and hint
SELECT * FROM dpwin.plan('plan_r', NULL);
SELECT * FROM dpwin.plan('plan_r', '2026-09-09'::timestamp);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan('plan_nosuch', '2026-09-09T00:00:00Z')$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.plan('plan_r', 'infinity')$$);
-- a source that went away is reported, not planned around
DROP TABLE plan_events;
SELECT pg_temp.try($$SELECT * FROM dpwin.plan('plan_r', '2026-09-09T00:00:00Z')$$);

SELECT dpwin.drop_route('plan_r');
DROP SERVER plan_ch;
RESET TimeZone;
RESET DateStyle;
RESET IntervalStyle;
