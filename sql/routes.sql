-- Routes: dpwin.create_route, alter_route, drop_route and dpwin.routes.
-- Every bad input is refused before anything is stored, with its own
-- SQLSTATE and a message naming the value.
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
CREATE FUNCTION pg_temp.try_hint(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	h text;
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
	RETURN SQLSTATE || ': ' || SQLERRM || ' / hint: ' || h;
END
$$;
-- create_route with the test's fixed arguments; $1 is spliced in as extra
-- or overriding named arguments
CREATE FUNCTION pg_temp.cr(name text, args text DEFAULT '') RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	RETURN pg_temp.try(format(
		'SELECT dpwin.create_route(%L, %s)', name,
		concat_ws(', ',
			CASE WHEN args ~ 'source =>' THEN NULL ELSE 'source => ''rt_events''' END,
			CASE WHEN args ~ 'window_column =>' THEN NULL ELSE 'window_column => ''observed_at''' END,
			CASE WHEN args ~ 'server =>' THEN NULL ELSE 'server => ''rt_ch''' END,
			CASE WHEN args ~ 'target_database =>' THEN NULL ELSE 'target_database => ''analytics''' END,
			CASE WHEN args ~ 'target_table =>' THEN NULL ELSE 'target_table => ''events''' END,
			CASE WHEN args ~ 'lookback =>' THEN NULL ELSE 'lookback => ''7 days''' END,
			CASE WHEN args ~ 'chunk_interval =>' THEN NULL ELSE 'chunk_interval => ''1 day''' END,
			CASE WHEN args ~ 'columns =>' THEN NULL ELSE 'columns => ''{id,observed_at,amount,note}''' END,
			NULLIF(args, ''))));
END
$$;

-- fixtures
CREATE ROLE dpwin_rt_owner;
CREATE ROLE dpwin_rt_other;
CREATE ROLE dpwin_rt_nobody;
GRANT dpwin_operator TO dpwin_rt_owner, dpwin_rt_other;
CREATE SERVER rt_ch FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://127.0.0.1:8123');
CREATE SERVER rt_ch_private FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://127.0.0.1:8124');
GRANT USAGE ON FOREIGN SERVER rt_ch TO dpwin_rt_owner, dpwin_rt_other;
CREATE FOREIGN DATA WRAPPER dpwin_rt_fdw;
CREATE SERVER rt_not_dpwin FOREIGN DATA WRAPPER dpwin_rt_fdw;
GRANT USAGE ON FOREIGN SERVER rt_not_dpwin TO dpwin_rt_owner;
CREATE DOMAIN rt_instant AS timestamptz;
CREATE TABLE rt_events (
	id bigint NOT NULL,
	observed_at timestamptz,
	amount numeric(18,2),
	note text,
	naive timestamp,
	label text,
	doubled bigint GENERATED ALWAYS AS (id * 2) STORED,
	spot point,
	dom_at rt_instant
);
CREATE TABLE rt_plain (id bigint NOT NULL, observed_at timestamptz, amount numeric(18,2), note text);
CREATE TABLE rt_part (id bigint, observed_at timestamptz) PARTITION BY RANGE (observed_at);
CREATE TABLE rt_part_2026 PARTITION OF rt_part FOR VALUES FROM ('2026-01-01Z') TO ('2027-01-01Z');
CREATE VIEW rt_view AS SELECT * FROM rt_plain;
CREATE MATERIALIZED VIEW rt_mv AS SELECT * FROM rt_plain;
CREATE FOREIGN TABLE rt_ft (id bigint, observed_at timestamptz) SERVER rt_ch;
CREATE SEQUENCE rt_seq;
CREATE INDEX rt_idx ON rt_plain (observed_at);
CREATE TABLE rt_secret (id bigint, observed_at timestamptz, hidden text);
CREATE TABLE rt_rls (id bigint, observed_at timestamptz);
CREATE TABLE rt_nulls (id bigint NOT NULL, observed_at timestamptz, tags integer[], note text NOT NULL);
ALTER TABLE rt_rls ENABLE ROW LEVEL SECURITY;
CREATE POLICY rt_rls_some ON rt_rls USING (id > 0);
GRANT SELECT ON rt_events, rt_plain, rt_part, rt_view, rt_mv, rt_ft, rt_seq, rt_rls, rt_nulls TO dpwin_rt_owner, dpwin_rt_other;
GRANT SELECT (id, observed_at) ON rt_secret TO dpwin_rt_owner;
CREATE FUNCTION rt_evidence(uuid, jsonb) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION rt_evidence_bool(uuid, jsonb) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION rt_evidence_args(uuid, json) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION rt_evidence_one(uuid) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION rt_evidence_set(uuid, jsonb) RETURNS SETOF int LANGUAGE sql AS 'SELECT 1';
CREATE PROCEDURE rt_evidence_proc(uuid, jsonb) LANGUAGE sql AS '';
CREATE FUNCTION rt_evidence_private(uuid, jsonb) RETURNS void LANGUAGE sql AS '';
REVOKE EXECUTE ON FUNCTION rt_evidence_private(uuid, jsonb) FROM PUBLIC;

-- Permissions to create: dpwin_operator members only
SET ROLE dpwin_rt_nobody;
SELECT pg_temp.cr('rt_r');
RESET ROLE;
-- even with EXECUTE granted, create_route itself checks membership
GRANT EXECUTE ON FUNCTION dpwin.create_route(text, regclass, name, name, text, text,
	interval, interval, integer, name[], integer, bigint, regprocedure, boolean, integer, interval) TO dpwin_rt_nobody;
SET ROLE dpwin_rt_nobody;
SELECT pg_temp.cr('rt_r');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION dpwin.create_route(text, regclass, name, name, text, text,
	interval, interval, integer, name[], integer, bigint, regprocedure, boolean, integer, interval) FROM dpwin_rt_nobody;

SET ROLE dpwin_rt_owner;

-- A good route, with defaults
SELECT pg_temp.cr('rt_r', 'parallelism => 4');
SELECT route_name, owner, source_schema, source_table, columns, window_column,
	   server_name, target_database, target_table, lookback, chunk_interval,
	   parallelism, batch_rows, max_encoded_bytes, evidence_function,
	   config_fingerprint, last_interval_end
  FROM dpwin.routes WHERE route_name = 'rt_r';
-- the fingerprint is a SHA-256 of the source-affecting fields only
SELECT length(config_fingerprint) = 64 AND config_fingerprint ~ '^[0-9a-f]+$' AS sha256_hex
  FROM dpwin.routes WHERE route_name = 'rt_r';
-- columns default to every user column in attnum order (rt_plain has no
-- generated or unsupported columns)
SELECT pg_temp.cr('rt_all', 'source => ''rt_plain'', columns => NULL');
SELECT columns FROM dpwin.routes WHERE route_name = 'rt_all';
-- same source-affecting fields, same fingerprint; other fields do not count
SELECT pg_temp.cr('rt_same', 'source => ''rt_plain'', columns => NULL, parallelism => 8, batch_rows => 100, max_encoded_bytes => 65536, evidence_function => ''rt_evidence(uuid,jsonb)''');
SELECT count(DISTINCT config_fingerprint) AS fingerprints FROM dpwin.routes WHERE route_name IN ('rt_all', 'rt_same');
-- limits are inclusive
SELECT pg_temp.cr('rt_max', 'parallelism => 64, batch_rows => 1000000, max_encoded_bytes => 268435456, lookback => ''10000 hours'', chunk_interval => ''1 hour''');
SELECT pg_temp.cr('rt_min', 'parallelism => 1, batch_rows => 1, max_encoded_bytes => 65536, lookback => ''1 microsecond'', chunk_interval => ''1 microsecond''');
-- partitioned tables, column-level SELECT, domains over timestamptz, any
-- return type of the evidence function, the longest names
SELECT pg_temp.cr('rt_p', 'source => ''rt_part'', columns => NULL');
SELECT pg_temp.cr('rt_cols', 'source => ''rt_secret'', columns => ''{id,observed_at}''');
SELECT pg_temp.cr('rt_dom', 'window_column => ''dom_at'', columns => ''{id,dom_at}''');
SELECT pg_temp.cr('rt_evb', 'evidence_function => ''rt_evidence_bool(uuid,jsonb)''');
SELECT pg_temp.cr('Ab_9$.-' || repeat('x', 56));
SELECT pg_temp.cr('rt_long', format('target_database => %L, target_table => %L', repeat('d', 206), repeat('t', 206)));
-- A NOTICE names the columns that may hold NULLs (a NULL fails a refresh
-- into a column that is not Nullable, docs/types.md), the window column
-- aside; none when the other columns are NOT NULL
SELECT pg_temp.cr('rt_nn', 'source => ''rt_nulls'', columns => ''{id,observed_at,note}''');
SELECT pg_temp.cr('rt_nn_arr', 'source => ''rt_nulls'', columns => NULL');

-- Bad inputs --------------------------------------------------------------
-- route name (42602) and duplicates (42710)
SELECT pg_temp.cr('1abc');
SELECT pg_temp.cr('has space');
SELECT pg_temp.cr('');
SELECT pg_temp.cr('é');
SELECT pg_temp.cr('quote"s');
SELECT pg_temp.cr('x' || repeat('y', 63));
SELECT pg_temp.cr('rt_r');
-- NULL where a value is required (22004)
SELECT pg_temp.try($$SELECT dpwin.create_route(NULL, 'rt_events', 'observed_at', 'rt_ch', 'a', 'b', '7 days', '1 day')$$);
SELECT pg_temp.try($$SELECT dpwin.create_route('rt_n', NULL, 'observed_at', 'rt_ch', 'a', 'b', '7 days', '1 day')$$);
SELECT pg_temp.try($$SELECT dpwin.create_route('rt_n', 'rt_events', NULL, 'rt_ch', 'a', 'b', '7 days', '1 day')$$);
SELECT pg_temp.try($$SELECT dpwin.create_route('rt_n', 'rt_events', 'observed_at', NULL, 'a', 'b', '7 days', '1 day')$$);
SELECT pg_temp.try($$SELECT dpwin.create_route('rt_n', 'rt_events', 'observed_at', 'rt_ch', NULL, 'b', '7 days', '1 day')$$);
SELECT pg_temp.try($$SELECT dpwin.create_route('rt_n', 'rt_events', 'observed_at', 'rt_ch', 'a', NULL, '7 days', '1 day')$$);
SELECT pg_temp.try($$SELECT dpwin.create_route('rt_n', 'rt_events', 'observed_at', 'rt_ch', 'a', 'b', NULL, '1 day')$$);
SELECT pg_temp.try($$SELECT dpwin.create_route('rt_n', 'rt_events', 'observed_at', 'rt_ch', 'a', 'b', '7 days', NULL)$$);
SELECT pg_temp.cr('rt_n', 'parallelism => NULL');
SELECT pg_temp.cr('rt_n', 'batch_rows => NULL');
SELECT pg_temp.cr('rt_n', 'max_encoded_bytes => NULL');
SELECT pg_temp.cr('rt_n', 'columns => ''{id,NULL}''');
-- the source (42809, 42501)
SELECT pg_temp.cr('rt_n', 'source => ''rt_view'', columns => NULL');
SELECT pg_temp.cr('rt_n', 'source => ''rt_mv'', columns => NULL');
SELECT pg_temp.cr('rt_n', 'source => ''rt_ft'', columns => NULL');
SELECT pg_temp.cr('rt_n', 'source => ''rt_seq'', columns => NULL');
SELECT pg_temp.cr('rt_n', 'source => ''rt_idx'', columns => NULL');
CREATE TEMP TABLE rt_temp (id bigint, observed_at timestamptz);
SELECT pg_temp.cr('rt_n', 'source => ''rt_temp'', columns => NULL');
DROP TABLE rt_temp;
SELECT pg_temp.cr('rt_n', 'source => ''rt_secret'', columns => ''{id,observed_at,hidden}''');
SELECT pg_temp.cr('rt_n', 'source => ''rt_secret'', columns => NULL');
SELECT pg_temp.try($$SELECT dpwin.create_route('rt_n', 'rt_rls', 'observed_at', 'rt_ch', 'a', 'b', '7 days', '1 day')$$);
SELECT pg_temp.cr('rt_n', 'source => 0');
-- the window column (42703, 42804)
SELECT pg_temp.cr('rt_n', 'window_column => ''observed''');
SELECT pg_temp.try_hint(format('SELECT dpwin.create_route(%L, %s)', 'rt_n',
	'''rt_events'', ''naive'', ''rt_ch'', ''a'', ''b'', ''7 days'', ''1 day'', columns => ''{id,naive}'''));
SELECT pg_temp.cr('rt_n', 'window_column => ''label'', columns => ''{id,label}''');
SELECT pg_temp.cr('rt_n', 'window_column => ''ctid'', columns => ''{id,ctid}''');
-- the columns (42703, 42701, 42P10, 0A000)
SELECT pg_temp.cr('rt_n', 'columns => ''{id,observed_at,nope}''');
SELECT pg_temp.cr('rt_n', 'columns => ''{id,observed_at,id}''');
SELECT pg_temp.cr('rt_n', 'columns => ''{id,amount}''');
SELECT pg_temp.cr('rt_n', 'columns => ''{}''');
SELECT pg_temp.cr('rt_n', 'columns => ''{id,observed_at,xmin}''');
SELECT pg_temp.try_hint($$SELECT dpwin.create_route('rt_n', 'rt_events', 'observed_at', 'rt_ch', 'a', 'b', '7 days', '1 day', columns => '{id,observed_at,doubled}')$$);
SELECT pg_temp.cr('rt_n', 'columns => NULL');
SELECT pg_temp.try_hint($$SELECT dpwin.create_route('rt_n', 'rt_events', 'observed_at', 'rt_ch', 'a', 'b', '7 days', '1 day', columns => '{id,observed_at,spot}')$$);
SELECT pg_temp.try($$SELECT dpwin.create_route('rt_n', 'rt_events', 'observed_at', 'rt_ch', 'a', 'b', '7 days', '1 day', columns => '{{id},{observed_at}}')$$);
-- the server (42704, 42809, 42501)
SELECT pg_temp.cr('rt_n', 'server => ''rt_nosuch''');
SELECT pg_temp.cr('rt_n', 'server => ''rt_not_dpwin''');
SELECT pg_temp.try_hint($$SELECT dpwin.create_route('rt_n', 'rt_events', 'observed_at', 'rt_ch_private', 'a', 'b', '7 days', '1 day', columns => '{id,observed_at}')$$);
-- the target (42602, 42622)
SELECT pg_temp.cr('rt_n', 'target_database => ''''');
SELECT pg_temp.cr('rt_n', 'target_table => ''''');
SELECT pg_temp.cr('rt_n', format('target_database => %L', repeat('d', 207)));
SELECT pg_temp.cr('rt_n', format('target_table => %L', repeat('é', 104)));
-- lookback and chunk_interval (22023)
SELECT pg_temp.cr('rt_n', 'lookback => ''1 month''');
SELECT pg_temp.cr('rt_n', 'lookback => ''1 year 1 day''');
SELECT pg_temp.cr('rt_n', 'chunk_interval => ''1 mon''');
SELECT pg_temp.cr('rt_n', 'lookback => ''0''');
SELECT pg_temp.cr('rt_n', 'lookback => ''-7 days''');
SELECT pg_temp.cr('rt_n', 'lookback => ''1 day -24 hours''');
SELECT pg_temp.cr('rt_n', 'chunk_interval => ''-1 hour''');
SELECT pg_temp.cr('rt_n', 'chunk_interval => ''0 seconds''');
SELECT pg_temp.cr('rt_n', 'lookback => ''1 day'', chunk_interval => ''24 hours 1 microsecond''');
SELECT pg_temp.cr('rt_n', 'lookback => ''10001 hours'', chunk_interval => ''1 hour''');
SELECT pg_temp.cr('rt_n', 'lookback => ''106751992 days''');
-- parallelism, batch_rows, max_encoded_bytes (22023)
SELECT pg_temp.cr('rt_n', 'parallelism => 0');
SELECT pg_temp.cr('rt_n', 'parallelism => 65');
SELECT pg_temp.cr('rt_n', 'parallelism => -1');
SELECT pg_temp.cr('rt_n', 'batch_rows => 0');
SELECT pg_temp.cr('rt_n', 'batch_rows => 1000001');
SELECT pg_temp.cr('rt_n', 'max_encoded_bytes => 65535');
SELECT pg_temp.cr('rt_n', 'max_encoded_bytes => 268435457');
-- the evidence function (42804, 42809, 42501)
SELECT pg_temp.cr('rt_n', 'evidence_function => ''rt_evidence_args(uuid,json)''');
SELECT pg_temp.cr('rt_n', 'evidence_function => ''rt_evidence_one(uuid)''');
SELECT pg_temp.cr('rt_n', 'evidence_function => ''rt_evidence_set(uuid,jsonb)''');
SELECT pg_temp.cr('rt_n', 'evidence_function => ''rt_evidence_proc(uuid,jsonb)''');
SELECT pg_temp.cr('rt_n', 'evidence_function => ''rt_evidence_private(uuid,jsonb)''');
SELECT pg_temp.cr('rt_n', 'evidence_function => ''sum(integer)''');
-- no way in for anything else
SELECT pg_temp.cr('rt_n', 'custom_predicate => ''id > 0''');
SELECT pg_temp.cr('rt_n', 'dedup => true');
-- nothing was stored by any of the above
SELECT count(*) AS bad_routes_stored FROM dpwin.routes WHERE route_name = 'rt_n';

-- dpwin.routes: operators only; the catalog table itself is closed
RESET ROLE;
SET ROLE dpwin_rt_nobody;
SELECT pg_temp.try($$SELECT * FROM dpwin.routes$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.route$$);
SELECT pg_temp.try($$SELECT dpwin.drop_route('rt_r')$$);
RESET ROLE;
SET ROLE dpwin_rt_owner;
SELECT pg_temp.try($$SELECT * FROM dpwin.route$$);
SELECT pg_temp.try($$UPDATE dpwin.route SET parallelism = 2$$);
SELECT pg_temp.try($$DELETE FROM dpwin.route$$);

-- alter_route ---------------------------------------------------------------
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', parallelism => 2, batch_rows => 1000, max_encoded_bytes => 131072, evidence_function => 'rt_evidence(uuid,jsonb)')$$);
SELECT parallelism, batch_rows, max_encoded_bytes, evidence_function FROM dpwin.routes WHERE route_name = 'rt_r';
-- evidence_function => '-' removes it
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', evidence_function => '-')$$);
SELECT evidence_function FROM dpwin.routes WHERE route_name = 'rt_r';
-- fingerprint-affecting changes move the fingerprint, and back again
SELECT config_fingerprint AS fp_before FROM dpwin.routes WHERE route_name = 'rt_r' \gset
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', lookback => '3 days', chunk_interval => '12 hours')$$);
SELECT lookback, chunk_interval, config_fingerprint <> :'fp_before' AS fingerprint_changed FROM dpwin.routes WHERE route_name = 'rt_r';
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', lookback => '168 hours', chunk_interval => '1 day')$$);
SELECT lookback, config_fingerprint = :'fp_before' AS same_as_7_days FROM dpwin.routes WHERE route_name = 'rt_r';
-- columns => '{}' means all columns again (here: refused, rt_events has a
-- generated column); a new source with the stored columns
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', columns => '{}')$$);
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', source => 'rt_plain')$$);
SELECT source_table, columns FROM dpwin.routes WHERE route_name = 'rt_r';
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', source => 'rt_events', target_database => 'analytics2', target_table => 'events2')$$);
SELECT source_table, target_database, target_table FROM dpwin.routes WHERE route_name = 'rt_r';
-- the merged definition is validated like a new one
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', source => 'rt_part')$$);
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', lookback => '1 mon')$$);
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', chunk_interval => '8 days')$$);
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', parallelism => 100)$$);
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', window_column => 'naive')$$);
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', server => 'rt_not_dpwin')$$);
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', target_table => '')$$);
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', evidence_function => 'rt_evidence_one(uuid)')$$);
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_nosuch', parallelism => 2)$$);
SELECT pg_temp.try($$SELECT dpwin.alter_route(NULL, parallelism => 2)$$);
-- only the owner alters or drops
RESET ROLE;
SET ROLE dpwin_rt_other;
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', parallelism => 3)$$);
SELECT pg_temp.try($$SELECT dpwin.drop_route('rt_r')$$);
-- but any operator can read the routes and plan them
SELECT count(*) FROM dpwin.routes WHERE route_name = 'rt_r';
SELECT count(*) FROM dpwin.plan('rt_r', '2026-09-09T00:00:00Z');
RESET ROLE;
-- a superuser may
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', parallelism => 3)$$);
SELECT owner, parallelism FROM dpwin.routes WHERE route_name = 'rt_r';

-- A source that changed is re-confirmed by alter_route(name)
ALTER TABLE rt_plain RENAME TO rt_plain_renamed;
SELECT source_table FROM dpwin.routes WHERE route_name = 'rt_all';
SELECT config_fingerprint AS fp_all FROM dpwin.routes WHERE route_name = 'rt_all' \gset
SET ROLE dpwin_rt_owner;
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_all')$$);
SELECT source_table, config_fingerprint <> :'fp_all' AS fingerprint_changed FROM dpwin.routes WHERE route_name = 'rt_all';
RESET ROLE;
ALTER TABLE rt_plain_renamed RENAME TO rt_plain;
-- a dropped route column is reported when the route is used
DROP VIEW rt_view;
DROP MATERIALIZED VIEW rt_mv;
ALTER TABLE rt_plain DROP COLUMN note;
SELECT pg_temp.try_hint($$SELECT * FROM dpwin.plan('rt_all', '2026-09-09T00:00:00Z')$$);
SET ROLE dpwin_rt_owner;
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_all')$$);
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_all', columns => '{}')$$);
SELECT columns FROM dpwin.routes WHERE route_name = 'rt_all';
-- a route whose source was dropped is pointed at a new one
RESET ROLE;
CREATE TABLE rt_gone (id bigint, observed_at timestamptz);
GRANT SELECT ON rt_gone TO dpwin_rt_owner;
SET ROLE dpwin_rt_owner;
SELECT pg_temp.cr('rt_gone_r', 'source => ''rt_gone'', columns => NULL');
RESET ROLE;
DROP TABLE rt_gone;
SET ROLE dpwin_rt_owner;
SELECT pg_temp.try_hint($$SELECT dpwin.alter_route('rt_gone_r', parallelism => 2)$$);
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_gone_r', source => 'rt_plain')$$);
SELECT source_table, columns FROM dpwin.routes WHERE route_name = 'rt_gone_r';
RESET ROLE;

-- Unfinished invocations pin the route's source-affecting fields
INSERT INTO dpwin.lease (server_name, target_database, target_table)
	VALUES ('rt_ch', 'analytics2', 'events2');
INSERT INTO dpwin.invocation (invocation_id, route_id, target_id, interval_end,
	window_lo, window_hi, config_fingerprint, lease_epoch, state, caller_role)
SELECT ('00000000-0000-4000-8000-00000000000' || n)::uuid, r.route_id, l.target_id,
	   '2026-09-09Z', '2026-09-02Z', '2026-09-09Z', r.config_fingerprint, 1, s,
	   r.owner
  FROM dpwin.route r, dpwin.lease l,
	   (VALUES (1, 'completed'), (2, 'failed'), (3, 'extracting')) v(n, s)
 WHERE r.route_name = 'rt_r' AND l.target_table = 'events2';
INSERT INTO dpwin.chunk (invocation_id, chunk_no, lo, hi)
	VALUES ('00000000-0000-4000-8000-000000000001', 0, '2026-09-02Z', '2026-09-03Z');
INSERT INTO dpwin.evidence (invocation_id, route_id, lease_epoch, metrics)
SELECT '00000000-0000-4000-8000-000000000001', route_id, 1, '{}' FROM dpwin.route WHERE route_name = 'rt_r';
INSERT INTO dpwin.route_state (route_id, last_interval_end, invocation_id)
SELECT route_id, '2026-09-09Z', '00000000-0000-4000-8000-000000000001' FROM dpwin.route WHERE route_name = 'rt_r';
SELECT last_interval_end FROM dpwin.routes WHERE route_name = 'rt_r';
SET ROLE dpwin_rt_owner;
SELECT pg_temp.try_hint($$SELECT dpwin.alter_route('rt_r', lookback => '2 days')$$);
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', columns => '{id,observed_at}')$$);
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', target_table => 'events3')$$);
-- the other fields can change; so can the evidence function
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', parallelism => 5, batch_rows => 10, evidence_function => 'rt_evidence(uuid,jsonb)')$$);
SELECT pg_temp.try_hint($$SELECT dpwin.drop_route('rt_r')$$);
RESET ROLE;
-- a source change under an unfinished invocation is caught too
ALTER TABLE rt_events ALTER COLUMN note TYPE varchar(20);
SET ROLE dpwin_rt_owner;
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', parallelism => 6)$$);
RESET ROLE;
ALTER TABLE rt_events ALTER COLUMN note TYPE text;
-- 'unknown' (publication outcome not known) is unfinished as well
UPDATE dpwin.invocation SET state = 'unknown' WHERE invocation_id = '00000000-0000-4000-8000-000000000003';
SET ROLE dpwin_rt_owner;
SELECT pg_temp.try($$SELECT dpwin.drop_route('rt_r')$$);
RESET ROLE;
UPDATE dpwin.invocation SET state = 'abandoned' WHERE invocation_id = '00000000-0000-4000-8000-000000000003';
SET ROLE dpwin_rt_owner;
SELECT pg_temp.try($$SELECT dpwin.alter_route('rt_r', lookback => '2 days')$$);
-- drop_route removes the route with its finished history
SELECT pg_temp.try($$SELECT dpwin.drop_route('rt_r')$$);
RESET ROLE;
SELECT (SELECT count(*) FROM dpwin.route WHERE route_name = 'rt_r') AS routes,
	   (SELECT count(*) FROM dpwin.invocation WHERE invocation_id::text LIKE '00000000-0000-4000-8000-%') AS invocations,
	   (SELECT count(*) FROM dpwin.chunk WHERE invocation_id = '00000000-0000-4000-8000-000000000001') AS chunks,
	   (SELECT count(*) FROM dpwin.evidence WHERE invocation_id = '00000000-0000-4000-8000-000000000001') AS evidence,
	   (SELECT count(*) FROM dpwin.route_state WHERE invocation_id = '00000000-0000-4000-8000-000000000001') AS route_state,
	   (SELECT count(*) FROM dpwin.lease WHERE target_table = 'events2') AS leases_kept;
DELETE FROM dpwin.lease WHERE target_table = 'events2';
SELECT pg_temp.try($$SELECT dpwin.drop_route('rt_r')$$);
SELECT pg_temp.try($$SELECT dpwin.drop_route(NULL)$$);

-- clean up
SET ROLE dpwin_rt_owner;
SELECT count(*) AS dropped FROM (SELECT dpwin.drop_route(route_name) FROM dpwin.routes WHERE owner = 'dpwin_rt_owner') s;
RESET ROLE;
SELECT count(*) AS routes_left FROM dpwin.routes WHERE route_name ~ '^(rt_|Ab_)';
DROP TABLE rt_events, rt_plain, rt_part, rt_secret, rt_rls, rt_nulls CASCADE;
DROP FOREIGN TABLE rt_ft;
DROP SEQUENCE rt_seq;
DROP DOMAIN rt_instant;
DROP FUNCTION rt_evidence(uuid, jsonb), rt_evidence_bool(uuid, jsonb),
	rt_evidence_args(uuid, json), rt_evidence_one(uuid),
	rt_evidence_set(uuid, jsonb), rt_evidence_private(uuid, jsonb);
DROP PROCEDURE rt_evidence_proc(uuid, jsonb);
DROP SERVER rt_not_dpwin;
DROP FOREIGN DATA WRAPPER dpwin_rt_fdw;
DROP SERVER rt_ch_private;
DROP SERVER rt_ch;
DROP ROLE dpwin_rt_owner, dpwin_rt_other, dpwin_rt_nobody;
