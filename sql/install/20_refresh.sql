/* dpwin — refresh, recovery from psql, and the views a DBA watches */

CREATE TYPE dpwin.refresh_result AS (
	invocation_id		uuid,
	state				text,
	window_lo			timestamptz,
	window_hi			timestamptz,
	chunks				integer,
	source_rows			bigint,
	staged_rows			bigint,
	final_rows			bigint,
	generation_table	text,
	backup_table		text,
	details				jsonb
);

CREATE FUNCTION dpwin.refresh(route text, interval_end timestamptz,
							  invocation uuid DEFAULT NULL)
	RETURNS dpwin.refresh_result
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_refresh';
COMMENT ON FUNCTION dpwin.refresh(text, timestamptz, uuid) IS
	'refresh [interval_end - lookback, interval_end) of a route into ClickHouse, atomically';

/* The name a DBA types: SELECT * FROM dpwin_refresh('events', '...'). */
CREATE FUNCTION public.dpwin_refresh(route text, interval_end timestamptz,
									 invocation uuid DEFAULT NULL)
	RETURNS dpwin.refresh_result
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_refresh';
COMMENT ON FUNCTION public.dpwin_refresh(text, timestamptz, uuid) IS
	'refresh [interval_end - lookback, interval_end) of a route into ClickHouse, atomically';

/*
 * These only refuse, as the matching dpwin.plan() overloads do: without
 * them a timestamp or a date would be cast to timestamptz in the session's
 * TimeZone and the window would move with the client's settings.  An
 * untyped literal still resolves to the timestamptz version.
 */
CREATE FUNCTION dpwin.refresh(route text, interval_end timestamp,
							  invocation uuid DEFAULT NULL)
	RETURNS dpwin.refresh_result
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	AS 'MODULE_PATHNAME', 'dpwin_plan_naive';
CREATE FUNCTION dpwin.refresh(route text, interval_end date,
							  invocation uuid DEFAULT NULL)
	RETURNS dpwin.refresh_result
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	AS 'MODULE_PATHNAME', 'dpwin_plan_naive';
CREATE FUNCTION public.dpwin_refresh(route text, interval_end timestamp,
									 invocation uuid DEFAULT NULL)
	RETURNS dpwin.refresh_result
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	AS 'MODULE_PATHNAME', 'dpwin_plan_naive';
CREATE FUNCTION public.dpwin_refresh(route text, interval_end date,
									 invocation uuid DEFAULT NULL)
	RETURNS dpwin.refresh_result
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	AS 'MODULE_PATHNAME', 'dpwin_plan_naive';

CREATE FUNCTION dpwin.recover(invocation uuid)
	RETURNS dpwin.refresh_result
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_recover';
COMMENT ON FUNCTION dpwin.recover(uuid) IS
	'finish what can be finished for an invocation: reconcile, evidence, state; never re-extracts after publication';

CREATE FUNCTION dpwin.abandon(invocation uuid)
	RETURNS dpwin.refresh_result
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_abandon';
COMMENT ON FUNCTION dpwin.abandon(uuid) IS
	'before any publication intent only: drop the invocation''s staging and generation tables and mark it abandoned';

CREATE FUNCTION dpwin.reconcile(invocation uuid)
	RETURNS jsonb
	LANGUAGE C STRICT VOLATILE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_reconcile';
COMMENT ON FUNCTION dpwin.reconcile(uuid) IS
	'read-only report of a publication intent against the physical tables and UUIDs';

CREATE FUNCTION dpwin.drop_backups(route text, keep integer)
	RETURNS SETOF text
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_drop_backups';
COMMENT ON FUNCTION dpwin.drop_backups(text, integer) IS
	'drop all but the newest keep backups of a route; returns the dropped tables';

CREATE FUNCTION dpwin.lock_target(server name, target_database text, target_table text)
	RETURNS boolean
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_lock_target';
COMMENT ON FUNCTION dpwin.lock_target(name, text, text) IS
	'take a ClickHouse target''s guard for this session, as dpwin''s own runs do';

CREATE FUNCTION dpwin.unlock_target(server name, target_database text, target_table text)
	RETURNS boolean
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_unlock_target';

CREATE FUNCTION dpwin.progress_raw(
	OUT invocation_id uuid, OUT route_id integer, OUT pid integer,
	OUT phase text, OUT chunks_total integer, OUT chunks_done integer,
	OUT rows bigint, OUT bytes bigint, OUT started_at timestamptz)
	RETURNS SETOF record
	LANGUAGE C STRICT VOLATILE
	AS 'MODULE_PATHNAME', 'dpwin_progress';

CREATE VIEW dpwin.progress AS
	SELECT p.invocation_id, r.route_name, p.pid, p.phase,
		   p.chunks_done, p.chunks_total, p.rows, p.bytes, p.started_at,
		   clock_timestamp() - p.started_at AS elapsed
	  FROM dpwin.progress_raw() p
	  LEFT JOIN dpwin.route r USING (route_id);

CREATE VIEW dpwin.invocations AS
	SELECT i.invocation_id, r.route_name, i.kind, i.interval_end, i.window_lo, i.window_hi,
		   i.state, i.error, i.error_sqlstate, i.lease_epoch, i.snapshot_id,
		   p.outcome AS publication_outcome, p.backup_table,
		   (SELECT count(*) FROM dpwin.chunk c WHERE c.invocation_id = i.invocation_id)::integer AS chunks,
		   (SELECT count(*) FROM dpwin.chunk c WHERE c.invocation_id = i.invocation_id
				AND c.state = 'verified')::integer AS chunks_verified,
		   i.caller_role AS caller,
		   i.created_at, i.updated_at, i.finished_at,
		   i.finished_at - i.created_at AS duration
	  FROM dpwin.invocation i
	  JOIN dpwin.route r USING (route_id)
	  LEFT JOIN dpwin.publication p USING (invocation_id);

CREATE VIEW dpwin.chunks AS
	SELECT c.invocation_id, r.route_name, c.chunk_no, c.lo, c.hi, c.attempt,
		   c.state, c.staging_table, c.rows, c.bytes, c.digest, c.worker_pid,
		   c.started_at, c.finished_at, c.finished_at - c.started_at AS duration,
		   c.error
	  FROM dpwin.chunk c
	  JOIN dpwin.invocation i USING (invocation_id)
	  JOIN dpwin.route r USING (route_id);

REVOKE ALL ON FUNCTION dpwin.refresh(text, timestamptz, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION public.dpwin_refresh(text, timestamptz, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.recover(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.abandon(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.reconcile(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.drop_backups(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.lock_target(name, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.unlock_target(name, text, text) FROM PUBLIC;
/* progress names invocations and routes: operators only, like the views */
REVOKE ALL ON FUNCTION dpwin.progress_raw() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dpwin.progress_raw() TO dpwin_operator;
GRANT EXECUTE ON FUNCTION dpwin.refresh(text, timestamptz, uuid),
	public.dpwin_refresh(text, timestamptz, uuid),
	dpwin.recover(uuid), dpwin.abandon(uuid), dpwin.reconcile(uuid),
	dpwin.drop_backups(text, integer),
	dpwin.lock_target(name, text, text), dpwin.unlock_target(name, text, text)
	TO dpwin_operator;
GRANT SELECT ON dpwin.progress, dpwin.invocations, dpwin.chunks TO dpwin_operator;
