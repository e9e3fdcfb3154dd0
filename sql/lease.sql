-- The target's guard from psql, dpwin.lock_target() and unlock_target(),
-- and the views a DBA watches: dpwin.invocations, dpwin.chunks and
-- dpwin.progress.  Concurrency (a refresh refused or waiting while the
-- guard is held) is in test/isolation/specs/lease_*.spec.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dpwin;
RESET client_min_messages;
\set SHOW_CONTEXT never
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';

CREATE FUNCTION pg_temp.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- dpwin's advisory locks held by this session, by target
CREATE FUNCTION pg_temp.guards() RETURNS TABLE (target text, mode text, granted boolean)
LANGUAGE sql AS $$
	SELECT e.target_database || '.' || e.target_table, l.mode, l.granted
	  FROM pg_locks l JOIN dpwin.lease e ON l.objid = e.target_id::oid
	 WHERE l.locktype = 'advisory' AND l.classid = 1146115913::oid
	   AND l.objsubid = 2 AND l.pid = pg_backend_pid()
	   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	 ORDER BY 1
$$;

-- fixtures
SET client_min_messages = warning;
DROP ROLE IF EXISTS dpwin_lease_op;
RESET client_min_messages;
CREATE ROLE dpwin_lease_op;
GRANT dpwin_operator TO dpwin_lease_op;
CREATE SERVER lease_ch FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://127.0.0.1:9');
GRANT USAGE ON FOREIGN SERVER lease_ch TO dpwin_lease_op;
CREATE SERVER lease_private FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://127.0.0.1:9');
CREATE FOREIGN DATA WRAPPER lease_other_fdw;
CREATE SERVER lease_other FOREIGN DATA WRAPPER lease_other_fdw;

-- lock_target takes the session-level advisory lock (1146115913, target_id)
-- and records the target in dpwin.lease on first use, epoch 0, no holder
SELECT dpwin.lock_target('lease_ch', 'analytics', 'events');
SELECT * FROM pg_temp.guards();
SELECT server_name, target_database, target_table, epoch, holder_pid, holder_invocation
  FROM dpwin.lease WHERE server_name = 'lease_ch';
-- the lock is the two-int advisory lock anyone can take with that key
SELECT pg_try_advisory_lock(1146115913, target_id) AS reentrant,
	   pg_advisory_unlock(1146115913, target_id) AS unlocked
  FROM dpwin.lease WHERE server_name = 'lease_ch' AND target_table = 'events';
SELECT * FROM pg_temp.guards();

-- session-level: it outlives the transaction that took it, even a
-- rolled back one
SELECT dpwin.lock_target('lease_ch', 'analytics', 'clicks') AND
	   dpwin.unlock_target('lease_ch', 'analytics', 'clicks') AS known_target;
BEGIN;
SELECT dpwin.lock_target('lease_ch', 'analytics', 'clicks');
ROLLBACK;
SELECT * FROM pg_temp.guards();
-- one lease row per (server, database, table): a target's row is reused
SELECT target_database, target_table, epoch FROM dpwin.lease
 WHERE server_name = 'lease_ch' ORDER BY target_id;

-- re-entrant like pg_advisory_lock: two locks need two unlocks; one more
-- returns false, with PostgreSQL's own warning
SELECT dpwin.lock_target('lease_ch', 'analytics', 'events');
SELECT dpwin.unlock_target('lease_ch', 'analytics', 'events');
SELECT * FROM pg_temp.guards();
SELECT dpwin.unlock_target('lease_ch', 'analytics', 'events');
SELECT dpwin.unlock_target('lease_ch', 'analytics', 'events');
SELECT dpwin.unlock_target('lease_ch', 'analytics', 'clicks');
SELECT * FROM pg_temp.guards();
-- taking and releasing the guard never bumps the epoch: only a runner does
SELECT target_table, epoch, holder_pid FROM dpwin.lease
 WHERE server_name = 'lease_ch' ORDER BY target_id;

-- bad arguments, refused before any lease row is written
SELECT pg_temp.try($$SELECT dpwin.lock_target(NULL, 'analytics', 'events')$$);
SELECT pg_temp.try($$SELECT dpwin.lock_target('lease_ch', NULL, 'events')$$);
SELECT pg_temp.try($$SELECT dpwin.unlock_target('lease_ch', 'analytics', NULL)$$);
SELECT pg_temp.try($$SELECT dpwin.lock_target('lease_nope', 'analytics', 'events')$$);
SELECT pg_temp.try($$SELECT dpwin.lock_target('lease_other', 'analytics', 'events')$$);
SELECT count(*) AS lease_rows FROM dpwin.lease
 WHERE server_name IN ('lease_ch', 'lease_nope', 'lease_other', 'lease_private');

-- operators may take the guard of a target on a server they may use;
-- other roles may not call it at all
SET ROLE dpwin_lease_op;
SELECT dpwin.lock_target('lease_ch', 'analytics', 'events');
SELECT pg_temp.try($$SELECT dpwin.lock_target('lease_private', 'analytics', 'events')$$);
RESET ROLE;
SELECT * FROM pg_temp.guards();
SET ROLE dpwin_lease_op;
SELECT dpwin.unlock_target('lease_ch', 'analytics', 'events');
RESET ROLE;
SELECT * FROM pg_temp.guards();
SELECT has_function_privilege('public', 'dpwin.lock_target(name, text, text)', 'EXECUTE') AS public_lock,
	   has_function_privilege('public', 'dpwin.unlock_target(name, text, text)', 'EXECUTE') AS public_unlock;

-- The views: operators read them, never the catalog beneath
SELECT c.relname, c.relkind,
	   has_table_privilege('dpwin_operator', c.oid, 'SELECT') AS operator_select,
	   has_table_privilege('dpwin_operator', c.oid, 'INSERT') AS operator_insert,
	   has_table_privilege('public', c.oid, 'SELECT') AS public_select
  FROM pg_class c
 WHERE c.relnamespace = 'dpwin'::regnamespace
   AND c.relname IN ('invocations', 'chunks', 'progress')
 ORDER BY 1;

-- a route and a journal as a refresh leaves them, written directly
CREATE TABLE lease_src (id bigint NOT NULL, w timestamptz NOT NULL);
GRANT SELECT ON lease_src TO dpwin_lease_op;
SET ROLE dpwin_lease_op;
SELECT dpwin.create_route('lease_r', 'lease_src', 'w', 'lease_ch', 'analytics', 'events',
						  interval '1 day', interval '12 hours') > 0 AS created;
RESET ROLE;
INSERT INTO dpwin.invocation (invocation_id, route_id, target_id, interval_end, window_lo,
							  window_hi, config_fingerprint, lease_epoch, state, caller_role)
SELECT 'bbbbbbbb-0000-4000-8000-000000000001', r.route_id, e.target_id,
	   '2026-09-09 00:00:00+00', '2026-09-08 00:00:00+00', '2026-09-09 00:00:00+00',
	   r.config_fingerprint, 1, 'extracting', 'dpwin_lease_op'::regrole
  FROM dpwin.route r, dpwin.lease e
 WHERE r.route_name = 'lease_r' AND e.server_name = 'lease_ch' AND e.target_table = 'events';
INSERT INTO dpwin.chunk (invocation_id, chunk_no, lo, hi, state, rows)
VALUES ('bbbbbbbb-0000-4000-8000-000000000001', 0, '2026-09-08 00:00:00+00', '2026-09-08 12:00:00+00', 'verified', 10),
	   ('bbbbbbbb-0000-4000-8000-000000000001', 1, '2026-09-08 12:00:00+00', '2026-09-09 00:00:00+00', 'running', NULL);

SET ROLE dpwin_lease_op;
SELECT invocation_id, route_name, interval_end, window_lo, window_hi, state, error,
	   error_sqlstate, lease_epoch, snapshot_id, publication_outcome, backup_table,
	   chunks, chunks_verified, caller, finished_at, duration
  FROM dpwin.invocations;
SELECT invocation_id, route_name, chunk_no, lo, hi, attempt, state, staging_table,
	   rows, bytes, digest, worker_pid, error
  FROM dpwin.chunks ORDER BY chunk_no;
-- nothing runs in this database's sessions: no progress row of this route
SELECT count(*) AS running FROM dpwin.progress WHERE route_name = 'lease_r';
-- every column of each view, by name
SELECT * FROM dpwin.progress WHERE false;
SELECT * FROM dpwin.invocations WHERE false;
SELECT * FROM dpwin.chunks WHERE false;
-- the catalog stays closed
SELECT pg_temp.try($$SELECT * FROM dpwin.invocation$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.chunk$$);
SELECT pg_temp.try($$SELECT * FROM dpwin.lease$$);
RESET ROLE;

-- clean up
DELETE FROM dpwin.invocation WHERE invocation_id = 'bbbbbbbb-0000-4000-8000-000000000001';
SELECT dpwin.drop_route('lease_r');
DELETE FROM dpwin.lease WHERE server_name = 'lease_ch';
DROP TABLE lease_src;
DROP SERVER lease_ch;
DROP SERVER lease_private;
DROP SERVER lease_other;
DROP FOREIGN DATA WRAPPER lease_other_fdw;
DROP ROLE dpwin_lease_op;
