-- A catalogue of bad inputs to the refresh and recovery API, plus a
-- representative sweep of route, server and user mapping options (routes.sql
-- and fdw.sql hold the exhaustive option cases).  Each is refused with its
-- own SQLSTATE and message.  The server below points at a port where
-- nothing listens: any call that reached ClickHouse would fail with HV00N
-- ("could not connect"), so every answer here also shows that the input
-- was refused before any I/O.  test/t/080_bad_input_no_io.t proves the same
-- against a live endpoint's query log.  Target topology refusals are in
-- test/t/040_admission.t.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dpwin;
RESET client_min_messages;
\set SHOW_CONTEXT never
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
SET IntervalStyle = 'postgres';

-- "SQLSTATE: message" of a failing statement, UUIDs masked; 'ok' otherwise
CREATE FUNCTION pg_temp.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' ||
		regexp_replace(SQLERRM, '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<uuid>', 'g');
END
$$;
-- the same with the detail, where the message alone does not say why
CREATE FUNCTION pg_temp.try_detail(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	d text;
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
	RETURN SQLSTATE || ': ' || SQLERRM || ' / detail: ' || d;
END
$$;

-- fixtures
CREATE ROLE dpwin_bi_owner;
CREATE ROLE dpwin_bi_other;
CREATE ROLE dpwin_bi_nobody;
CREATE ROLE dpwin_bi_nosel;
CREATE ROLE dpwin_bi_nousage;
GRANT dpwin_operator TO dpwin_bi_owner, dpwin_bi_other, dpwin_bi_nosel, dpwin_bi_nousage;
CREATE SERVER bi_ch FOREIGN DATA WRAPPER dpwin_clickhouse
	OPTIONS (url 'http://127.0.0.1:1', connect_timeout '1s');
GRANT USAGE ON FOREIGN SERVER bi_ch TO dpwin_bi_owner, dpwin_bi_other, dpwin_bi_nosel;
CREATE USER MAPPING FOR PUBLIC SERVER bi_ch OPTIONS (user 'bi', password 'bi-secret');
CREATE FOREIGN DATA WRAPPER dpwin_bi_fdw;
CREATE SERVER bi_not_dpwin FOREIGN DATA WRAPPER dpwin_bi_fdw;
CREATE TABLE bi_events (id bigint NOT NULL, observed_at timestamptz, note text, naive timestamp);
CREATE TABLE bi_other (id bigint NOT NULL, observed_at timestamptz);
GRANT SELECT ON bi_events, bi_other TO dpwin_bi_owner, dpwin_bi_other, dpwin_bi_nousage;
GRANT SELECT (id, observed_at) ON bi_events TO dpwin_bi_nosel;
CREATE FUNCTION bi_evidence(uuid, jsonb) RETURNS void LANGUAGE sql AS '';

SET ROLE dpwin_bi_owner;
SELECT dpwin.create_route('bi_r', 'bi_events', 'observed_at', 'bi_ch', 'bi', 'events',
	'7 days', '1 day', columns => '{id,observed_at,note}') > 0 AS created;
SELECT dpwin.create_route('bi_r2', 'bi_other', 'observed_at', 'bi_ch', 'bi', 'other',
	'1 day', '1 hour') > 0 AS created;
SELECT dpwin.create_route('bi_ev', 'bi_other', 'observed_at', 'bi_ch', 'bi', 'other_ev',
	'1 day', '1 day', evidence_function => 'bi_evidence(uuid,jsonb)') > 0 AS created;
RESET ROLE;

-- Finished invocations of bi_r, as a refresh leaves them (no I/O needed to
-- make them): one failed, one completed.
INSERT INTO dpwin.lease (server_name, target_database, target_table)
	VALUES ('bi_ch', 'bi', 'events');
INSERT INTO dpwin.invocation (invocation_id, route_id, target_id, interval_end,
	window_lo, window_hi, config_fingerprint, lease_epoch, state, caller_role)
SELECT v.id::uuid, r.route_id, l.target_id, '2026-09-09Z', '2026-09-02Z', '2026-09-09Z',
	   r.config_fingerprint, 1, v.state, r.owner
  FROM dpwin.route r, dpwin.lease l,
	   (VALUES ('00000000-0000-4000-8000-0000000b1001', 'failed'),
			   ('00000000-0000-4000-8000-0000000b1002', 'completed')) v(id, state)
 WHERE r.route_name = 'bi_r' AND l.server_name = 'bi_ch' AND l.target_table = 'events';

-- 1. dpwin_refresh / dpwin.refresh: arguments ----------------------------
SET ROLE dpwin_bi_owner;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh(NULL, '2026-09-09Z')$$) AS null_route;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('bi_r', NULL)$$) AS null_interval_end;
SELECT pg_temp.try($$SELECT * FROM dpwin.refresh('bi_r', NULL, NULL)$$) AS null_interval_end_and_invocation;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('bi_r', 'infinity')$$) AS infinity;
SELECT pg_temp.try($$SELECT * FROM dpwin.refresh('bi_r', '-infinity')$$) AS minus_infinity;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('bi_r', '2026-09-09 00:00:00'::timestamp)$$) AS timestamp_without_tz;
SELECT pg_temp.try($$SELECT * FROM dpwin.refresh('bi_r', localtimestamp)$$) AS localtimestamp;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('bi_r', current_date, NULL)$$) AS date;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('bi_r', '2026-09-09'::text)$$) AS text_argument;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('bi_r', 'yesterday at noon')$$) AS not_a_timestamp;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('bi_r', '4714-11-24 00:00:00+00 BC')$$) AS window_before_timestamp_range;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('bi_r', '294276-12-31 23:59:59+00')$$) AS window_at_timestamp_end;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('bi_r', '1900-01-07 23:59:59.999999+00')$$) AS window_starts_before_1900;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('bi_r', '2300-01-01 00:00:00.000001+00')$$) AS window_ends_after_2299;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('bi_r', '2400-01-01Z')$$) AS window_beyond_datetime64;
-- the route
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('bi_nosuch', '2026-09-09Z')$$) AS unknown_route;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('', '2026-09-09Z')$$) AS empty_route;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('BI_R', '2026-09-09Z')$$) AS route_names_are_case_sensitive;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('bi_r''; DROP TABLE bi_events; --', '2026-09-09Z')$$) AS injection_in_route;
-- the invocation id
SELECT pg_temp.try($$SELECT * FROM dpwin.refresh('bi_r', '2026-09-09Z', 'not-a-uuid')$$) AS malformed_uuid;
SELECT pg_temp.try($$SELECT * FROM dpwin.refresh('bi_r', '2026-09-09Z', '00000000-0000-4000-8000-0000000b1001'::text)$$) AS uuid_as_text;
SELECT pg_temp.try($$SELECT * FROM dpwin.refresh('bi_r', '2026-09-10Z', '00000000-0000-4000-8000-0000000b1001')$$) AS invocation_of_other_interval_end;
SELECT pg_temp.try($$SELECT * FROM dpwin.refresh('bi_r2', '2026-09-09Z', '00000000-0000-4000-8000-0000000b1001')$$) AS invocation_of_other_route;
SELECT pg_temp.try($$SELECT * FROM dpwin.refresh('bi_r', '2026-09-09Z', '00000000-0000-4000-8000-0000000b1001')$$) AS rerun_of_failed_invocation;
RESET ROLE;

-- 2. who may refresh ------------------------------------------------------
SET ROLE dpwin_bi_nobody;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('bi_r', '2026-09-09Z')$$) AS not_an_operator;
RESET ROLE;
-- even with EXECUTE granted, the function checks membership itself
GRANT EXECUTE ON FUNCTION public.dpwin_refresh(text, timestamptz, uuid) TO dpwin_bi_nobody;
SET ROLE dpwin_bi_nobody;
SELECT pg_temp.try_detail($$SELECT * FROM dpwin_refresh('bi_r', '2026-09-09Z')$$) AS not_an_operator_with_execute;
RESET ROLE;
REVOKE EXECUTE ON FUNCTION public.dpwin_refresh(text, timestamptz, uuid) FROM dpwin_bi_nobody;
SET ROLE dpwin_bi_nosel;
SELECT pg_temp.try_detail($$SELECT * FROM dpwin_refresh('bi_r', '2026-09-09Z')$$) AS no_select_on_a_column;
RESET ROLE;
SET ROLE dpwin_bi_nousage;
SELECT pg_temp.try_detail($$SELECT * FROM dpwin_refresh('bi_r', '2026-09-09Z')$$) AS no_usage_on_server;
RESET ROLE;
SET ROLE dpwin_bi_other;
SELECT pg_temp.try($$SELECT * FROM dpwin.refresh('bi_r', '2026-09-09Z', '00000000-0000-4000-8000-0000000b1001')$$) AS rerun_of_other_owners_invocation;
RESET ROLE;
-- row-level security enabled after the route was declared
ALTER TABLE bi_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY bi_some ON bi_events USING (id > 0);
SET ROLE dpwin_bi_other;
SELECT pg_temp.try_detail($$SELECT * FROM dpwin_refresh('bi_r', '2026-09-09Z')$$) AS row_level_security;
RESET ROLE;
DROP POLICY bi_some ON bi_events;
ALTER TABLE bi_events DISABLE ROW LEVEL SECURITY;
-- EXECUTE on the evidence function revoked after the route was declared
REVOKE EXECUTE ON FUNCTION bi_evidence(uuid, jsonb) FROM PUBLIC;
SET ROLE dpwin_bi_other;
SELECT pg_temp.try_detail($$SELECT * FROM dpwin_refresh('bi_ev', '2026-09-09Z')$$) AS no_execute_on_evidence_function;
RESET ROLE;
-- a source column that changed type since the route was declared
ALTER TABLE bi_events ALTER COLUMN note TYPE varchar(40);
SET ROLE dpwin_bi_owner;
SELECT pg_temp.try_detail($$SELECT * FROM dpwin_refresh('bi_r', '2026-09-09Z')$$) AS source_changed;
RESET ROLE;
ALTER TABLE bi_events ALTER COLUMN note TYPE text;
-- the route's server was dropped
CREATE SERVER bi_ch_gone FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://127.0.0.1:1');
GRANT USAGE ON FOREIGN SERVER bi_ch_gone TO dpwin_bi_owner;
SET ROLE dpwin_bi_owner;
SELECT dpwin.create_route('bi_gone', 'bi_other', 'observed_at', 'bi_ch_gone', 'bi', 'gone',
	'1 day', '1 day') > 0 AS created;
RESET ROLE;
DROP SERVER bi_ch_gone;
SET ROLE dpwin_bi_owner;
SELECT pg_temp.try($$SELECT * FROM dpwin_refresh('bi_gone', '2026-09-09Z')$$) AS server_dropped;
RESET ROLE;

-- 3. recover, abandon, reconcile ------------------------------------------
SET ROLE dpwin_bi_owner;
SELECT pg_temp.try($$SELECT * FROM dpwin.recover(NULL)$$) AS recover_null;
SELECT pg_temp.try($$SELECT * FROM dpwin.recover('00000000-0000-4000-8000-00000000dead')$$) AS recover_unknown;
SELECT pg_temp.try($$SELECT * FROM dpwin.recover('00000000-0000-4000-8000-0000000b1001')$$) AS recover_failed;
SELECT pg_temp.try($$SELECT * FROM dpwin.recover('{00000000-0000-4000-8000-0000000b100}')$$) AS recover_malformed;
SELECT pg_temp.try($$SELECT * FROM dpwin.abandon(NULL)$$) AS abandon_null;
SELECT pg_temp.try($$SELECT * FROM dpwin.abandon('00000000-0000-4000-8000-00000000dead')$$) AS abandon_unknown;
SELECT pg_temp.try($$SELECT * FROM dpwin.abandon('00000000-0000-4000-8000-0000000b1002')$$) AS abandon_completed;
SELECT pg_temp.try($$SELECT dpwin.reconcile('00000000-0000-4000-8000-00000000dead')$$) AS reconcile_unknown;
SELECT dpwin.reconcile(NULL) IS NULL AS reconcile_null_is_null;
RESET ROLE;
SET ROLE dpwin_bi_other;
SELECT pg_temp.try($$SELECT * FROM dpwin.recover('00000000-0000-4000-8000-0000000b1001')$$) AS recover_not_owner;
SELECT pg_temp.try($$SELECT * FROM dpwin.abandon('00000000-0000-4000-8000-0000000b1001')$$) AS abandon_not_owner;
SELECT pg_temp.try($$SELECT dpwin.reconcile('00000000-0000-4000-8000-0000000b1002')$$) AS reconcile_not_owner;
RESET ROLE;
SET ROLE dpwin_bi_nobody;
SELECT pg_temp.try($$SELECT * FROM dpwin.recover('00000000-0000-4000-8000-0000000b1001')$$) AS recover_not_operator;
RESET ROLE;

-- 4. drop_backups ----------------------------------------------------------
SET ROLE dpwin_bi_owner;
SELECT pg_temp.try($$SELECT * FROM dpwin.drop_backups('bi_r', -1)$$) AS keep_negative;
SELECT pg_temp.try($$SELECT * FROM dpwin.drop_backups('bi_r', NULL)$$) AS keep_null;
SELECT pg_temp.try($$SELECT * FROM dpwin.drop_backups(NULL, 1)$$) AS route_null;
SELECT pg_temp.try($$SELECT * FROM dpwin.drop_backups('bi_nosuch', 1)$$) AS unknown_route;
SELECT pg_temp.try($$SELECT * FROM dpwin.drop_backups('bi_r', 2147483648)$$) AS keep_overflow;
RESET ROLE;
SET ROLE dpwin_bi_other;
SELECT pg_temp.try($$SELECT * FROM dpwin.drop_backups('bi_r', 0)$$) AS not_owner;
RESET ROLE;

-- 5. lock_target / unlock_target -------------------------------------------
SET ROLE dpwin_bi_owner;
SELECT pg_temp.try($$SELECT dpwin.lock_target(NULL, 'bi', 'events')$$) AS null_server;
SELECT pg_temp.try($$SELECT dpwin.lock_target('bi_ch', NULL, 'events')$$) AS null_database;
SELECT pg_temp.try($$SELECT dpwin.lock_target('bi_ch', '', 'events')$$) AS empty_database;
SELECT pg_temp.try($$SELECT dpwin.lock_target('bi_ch', 'bi', '')$$) AS empty_table;
SELECT pg_temp.try($$SELECT dpwin.lock_target('bi_nosuch', 'bi', 'events')$$) AS unknown_server;
RESET ROLE;
GRANT USAGE ON FOREIGN SERVER bi_not_dpwin TO dpwin_bi_owner;
SET ROLE dpwin_bi_owner;
SELECT pg_temp.try($$SELECT dpwin.lock_target('bi_not_dpwin', 'bi', 'events')$$) AS server_of_other_wrapper;
SELECT pg_temp.try($$SELECT dpwin.unlock_target('bi_not_dpwin', 'bi', 'events')$$) AS unlock_server_of_other_wrapper;
RESET ROLE;
SET ROLE dpwin_bi_nousage;
SELECT pg_temp.try($$SELECT dpwin.lock_target('bi_ch', 'bi', 'events')$$) AS no_usage_on_server;
RESET ROLE;
-- nothing was journaled for the refused targets
SELECT count(*) AS lease_rows_for_bad_targets
  FROM dpwin.lease WHERE target_database = '' OR target_table = '';

-- 6. planning ----------------------------------------------------------------
SELECT pg_temp.try($$SELECT * FROM dpwin.plan('bi_r', '2026-09-09'::timestamp)$$) AS plan_timestamp_without_tz;
SELECT pg_temp.try($$SELECT * FROM dpwin.plan_window('2026-09-09Z', '1 mon', '1 day')$$) AS plan_window_month;

-- 7. routes: a representative sweep (routes.sql has every case) ------------
SET ROLE dpwin_bi_owner;
SELECT pg_temp.try($$SELECT dpwin.create_route('x''; DROP TABLE bi_events; --', 'bi_other', 'observed_at', 'bi_ch', 'bi', 'x', '1 day', '1 hour')$$) AS injection_in_route_name;
SELECT pg_temp.try($$SELECT dpwin.create_route('Événements', 'bi_other', 'observed_at', 'bi_ch', 'bi', 'x', '1 day', '1 hour')$$) AS non_ascii_route_name;
SELECT pg_temp.try($$SELECT dpwin.create_route('bi_x', 'bi_other; DROP TABLE bi_events', 'observed_at', 'bi_ch', 'bi', 'x', '1 day', '1 hour')$$) AS injection_in_source;
SELECT pg_temp.try($$SELECT dpwin.create_route('bi_x', 'bi_events', 'naive', 'bi_ch', 'bi', 'x', '1 day', '1 hour', columns => '{id,naive}')$$) AS window_column_without_tz;
SELECT pg_temp.try($$SELECT dpwin.create_route('bi_x', 'bi_other', 'observed_at', 'bi_ch', 'bi', 'x', '1 day', '1 hour', columns => '{id,observed_at,"id; DROP TABLE bi_events"}')$$) AS injection_in_column;
SELECT pg_temp.try($$SELECT dpwin.create_route('bi_x', 'bi_other', 'observed_at', 'bi_ch', 'bi', 'x', '1 mon', '1 day')$$) AS lookback_in_months;
SELECT pg_temp.try($$SELECT dpwin.create_route('bi_x', 'bi_other', 'observed_at', 'bi_ch', 'bi', 'x', '1 day', '2 days')$$) AS chunk_longer_than_lookback;
SELECT pg_temp.try($$SELECT dpwin.create_route('bi_x', 'bi_other', 'observed_at', 'bi_ch', 'bi', 'x', '1 day', '1 hour', parallelism => 0)$$) AS parallelism_zero;
SELECT pg_temp.try($$SELECT dpwin.create_route('bi_x', 'bi_other', 'observed_at', 'bi_ch', 'bi', 'x', '1 day', '1 hour', max_encoded_bytes => 1024)$$) AS max_encoded_bytes_too_small;
SELECT pg_temp.try($$SELECT dpwin.create_route('bi_x', 'bi_other', 'observed_at', 'bi_not_dpwin', 'bi', 'x', '1 day', '1 hour')$$) AS server_of_other_wrapper;
SELECT pg_temp.try($$SELECT dpwin.create_route('bi_x', 'bi_other', 'observed_at', 'bi_ch', '', 'x', '1 day', '1 hour')$$) AS empty_target_database;
SELECT pg_temp.try($$SELECT dpwin.alter_route('bi_r', chunk_interval => '8 days')$$) AS alter_chunk_longer_than_lookback;
SELECT pg_temp.try($$SELECT dpwin.alter_route('bi_nosuch', parallelism => 2)$$) AS alter_unknown_route;
RESET ROLE;
SET ROLE dpwin_bi_other;
SELECT pg_temp.try($$SELECT dpwin.alter_route('bi_r', parallelism => 2)$$) AS alter_not_owner;
SELECT pg_temp.try($$SELECT dpwin.drop_route('bi_r')$$) AS drop_not_owner;
RESET ROLE;
SELECT count(*) AS bad_routes_stored FROM dpwin.routes WHERE route_name NOT IN ('bi_r', 'bi_r2', 'bi_ev', 'bi_gone') AND route_name ~* '^(bi|x|é)';

-- 8. server and user mapping options: a representative sweep (fdw.sql) ----
SELECT pg_temp.try($$CREATE SERVER bi_bad FOREIGN DATA WRAPPER dpwin_clickhouse$$) AS server_without_url;
SELECT pg_temp.try($$CREATE SERVER bi_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://dpwin:bi-secret@h:8123')$$) AS credentials_in_url;
SELECT pg_temp.try($$CREATE SERVER bi_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'file:///etc/passwd')$$) AS file_url;
SELECT pg_temp.try($$CREATE SERVER bi_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'https://h:8443', verify_peer 'sometimes')$$) AS verify_peer_not_boolean;
SELECT pg_temp.try($$CREATE SERVER bi_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'https://h:8443', ca_file 'ca.pem')$$) AS ca_file_relative;
SELECT pg_temp.try($$CREATE SERVER bi_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', request_timeout 'forever')$$) AS request_timeout_not_a_duration;
SELECT pg_temp.try($$CREATE SERVER bi_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'readonly=0&password=x')$$) AS password_in_settings;
SELECT pg_temp.try($$CREATE SERVER bi_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', settings 'a=1&b=x y')$$) AS settings_not_url_safe;
SELECT pg_temp.try($$CREATE SERVER bi_bad FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://h', password 'bi-secret')$$) AS password_on_server;
SELECT pg_temp.try($$ALTER SERVER bi_ch OPTIONS (SET url 'http://127.0.0.1:1/?user=default')$$) AS alter_url_with_query;
SELECT pg_temp.try($$CREATE USER MAPPING FOR dpwin_bi_owner SERVER bi_ch OPTIONS (user 'u', host 'h')$$) AS mapping_unknown_option;
SELECT pg_temp.try($$CREATE USER MAPPING FOR dpwin_bi_owner SERVER bi_ch OPTIONS (user '')$$) AS mapping_empty_user;
SELECT pg_temp.try($$ALTER USER MAPPING FOR PUBLIC SERVER bi_ch OPTIONS (ADD passwd 'bi-secret')$$) AS mapping_misspelt_password;
-- the server is unchanged
SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'bi_ch';

-- nothing was journaled by any refused call: the two fabricated
-- invocations are all there is
SELECT count(*) AS invocations
  FROM dpwin.invocation i JOIN dpwin.route r USING (route_id)
 WHERE r.route_name IN ('bi_r', 'bi_r2', 'bi_ev', 'bi_gone');
SELECT count(*) AS leases FROM dpwin.lease WHERE server_name IN ('bi_ch', 'bi_ch_gone', 'bi_not_dpwin');
SELECT to_regclass('bi_events') IS NOT NULL AS bi_events_still_there;

-- clean up
SET ROLE dpwin_bi_owner;
SELECT count(*) AS dropped FROM (SELECT dpwin.drop_route(route_name) FROM dpwin.routes WHERE owner = 'dpwin_bi_owner') s;
RESET ROLE;
DELETE FROM dpwin.lease WHERE server_name = 'bi_ch';
DROP TABLE bi_events, bi_other;
DROP FUNCTION bi_evidence(uuid, jsonb);
DROP SERVER bi_not_dpwin;
DROP FOREIGN DATA WRAPPER dpwin_bi_fdw;
DROP USER MAPPING FOR PUBLIC SERVER bi_ch;
DROP SERVER bi_ch;
DROP ROLE dpwin_bi_owner, dpwin_bi_other, dpwin_bi_nobody, dpwin_bi_nosel, dpwin_bi_nousage;
-- leave the database as pg_regress made it: extension.sql, next in line,
-- checks what CREATE EXTENSION itself does
SET client_min_messages = warning;
DROP EXTENSION dpwin CASCADE;
RESET client_min_messages;
