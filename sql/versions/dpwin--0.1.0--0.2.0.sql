/* dpwin — update from 0.1.0 to 0.2.0 (CHANGELOG.md)
 *
 * Relations and roles are stored as regclass and regrole, so that a dump
 * carries their names; the evidence function is stored as its qualified
 * signature (text), since pg_upgrade refuses regprocedure columns;
 * dpwin.verification is registered for pg_dump; dpwin.server_conf(),
 * which only tests called, is dropped (the test module has its own);
 * invocations have a kind, and dpwin.rollback() puts a kept backup back.
 */

\echo Use "ALTER EXTENSION dpwin UPDATE TO '0.2.0'" to load this file. \quit

/*
 * With only pg_catalog on the path, a regprocedure prints schema-qualified
 * unless it lives in pg_catalog.  The setting ends with this script.
 */
SELECT pg_catalog.set_config('search_path', 'pg_catalog', true);

/* the views read the columns whose types change: drop, alter, recreate */
DROP VIEW dpwin.routes;
DROP VIEW dpwin.invocations;
DROP VIEW dpwin.verifications;

ALTER TABLE dpwin.route
	ALTER COLUMN source_relid TYPE regclass USING source_relid::regclass,
	ALTER COLUMN owner TYPE regrole USING owner::regrole,
	ALTER COLUMN evidence_function TYPE text USING evidence_function::text;
ALTER TABLE dpwin.invocation
	ALTER COLUMN caller_role TYPE regrole USING caller_role::regrole;
/*
 * Every invocation of 0.1.0 was a refresh.  The column is filled by an
 * UPDATE, not by ADD COLUMN's default: a default given there would be kept
 * as the column's "missing value" for the old rows, which a fresh install
 * has not, and the updated catalog would not be exactly a fresh one.
 */
ALTER TABLE dpwin.invocation ADD COLUMN kind text;
UPDATE dpwin.invocation SET kind = 'refresh';
ALTER TABLE dpwin.invocation
	ALTER COLUMN kind SET DEFAULT 'refresh',
	ALTER COLUMN kind SET NOT NULL,
	ADD CONSTRAINT invocation_kind_check CHECK (kind IN ('refresh', 'rollback'));
ALTER TABLE dpwin.verification
	ALTER COLUMN caller_role TYPE regrole USING caller_role::regrole;

CREATE VIEW dpwin.routes AS
SELECT r.route_id,
	   r.route_name,
	   pg_catalog.pg_get_userbyid(r.owner) AS owner,
	   r.source_schema,
	   r.source_table,
	   r.columns,
	   r.window_column,
	   r.server_name,
	   r.target_database,
	   r.target_table,
	   r.lookback,
	   r.chunk_interval,
	   r.parallelism,
	   r.batch_rows,
	   r.max_encoded_bytes,
	   r.evidence_function,
	   r.skip_unchanged,
	   r.config_fingerprint,
	   s.last_interval_end,
	   r.created_at,
	   r.updated_at
  FROM dpwin.route r
  LEFT JOIN dpwin.route_state s USING (route_id);

REVOKE ALL ON dpwin.routes FROM PUBLIC;
GRANT SELECT ON dpwin.routes TO dpwin_operator;

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

GRANT SELECT ON dpwin.invocations TO dpwin_operator;

CREATE VIEW dpwin.verifications AS
	SELECT v.verification_id, r.route_name, v.interval_end, v.window_lo, v.window_hi,
		   jsonb_array_length(v.chunks) AS chunks, v.drifting_chunks,
		   v.drifting_chunks = 0 AS matches, v.target_uuid, v.snapshot_id,
		   v.chunks AS chunk_results, v.caller_role AS caller,
		   v.started_at, v.finished_at, v.finished_at - v.started_at AS duration
	  FROM dpwin.verification v
	  JOIN dpwin.route r USING (route_id);

REVOKE ALL ON dpwin.verifications FROM PUBLIC;
GRANT SELECT ON dpwin.verifications TO dpwin_operator;

SELECT pg_catalog.pg_extension_config_dump('dpwin.verification', '');

DROP FUNCTION dpwin.server_conf(name);

/*
 * Operating a route (0.2.0): keep_backups and stale_after on the route,
 * the backfill journal, retention's record of dropped backups, and
 * dpwin.health.
 */
/*
 * keep_backups is filled before its default is set: a column added with a
 * default keeps it as a "missing value" that a fresh install's table has
 * not, and pg_upgrade (pg_dump --binary-upgrade) carries it.
 */
ALTER TABLE dpwin.route
	ADD COLUMN keep_backups integer,
	ADD COLUMN stale_after interval CHECK (stale_after > interval '0');
UPDATE dpwin.route SET keep_backups = 3;
ALTER TABLE dpwin.route
	ALTER COLUMN keep_backups SET DEFAULT 3,
	ALTER COLUMN keep_backups SET NOT NULL,
	ADD CONSTRAINT route_keep_backups_check CHECK (keep_backups >= 1);
ALTER TABLE dpwin.invocation ADD COLUMN backfill_id bigint;
ALTER TABLE dpwin.publication ADD COLUMN backup_dropped_at timestamptz;

DROP FUNCTION dpwin.create_route(text, regclass, name, name, text, text,
	interval, interval, integer, name[], integer, bigint, regprocedure, boolean);
DROP FUNCTION dpwin.alter_route(text, regclass, name, name, text, text,
	interval, interval, integer, name[], integer, bigint, regprocedure, boolean);

CREATE FUNCTION dpwin.create_route(
	route_name			text,
	source				regclass,
	window_column		name,
	server				name,
	target_database		text,
	target_table		text,
	lookback			interval,
	chunk_interval		interval,
	parallelism			integer DEFAULT 1,
	columns				name[] DEFAULT NULL,
	batch_rows			integer DEFAULT 8192,
	max_encoded_bytes	bigint DEFAULT 4194304,
	evidence_function	regprocedure DEFAULT NULL,
	skip_unchanged		boolean DEFAULT false,
	keep_backups		integer DEFAULT 3,
	stale_after			interval DEFAULT NULL)
	RETURNS integer
	LANGUAGE C VOLATILE PARALLEL UNSAFE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_create_route';

CREATE FUNCTION dpwin.alter_route(
	route_name			text,
	source				regclass DEFAULT NULL,
	window_column		name DEFAULT NULL,
	server				name DEFAULT NULL,
	target_database		text DEFAULT NULL,
	target_table		text DEFAULT NULL,
	lookback			interval DEFAULT NULL,
	chunk_interval		interval DEFAULT NULL,
	parallelism			integer DEFAULT NULL,
	columns				name[] DEFAULT NULL,
	batch_rows			integer DEFAULT NULL,
	max_encoded_bytes	bigint DEFAULT NULL,
	evidence_function	regprocedure DEFAULT NULL,
	skip_unchanged		boolean DEFAULT NULL,
	keep_backups		integer DEFAULT NULL,
	stale_after			interval DEFAULT NULL)
	RETURNS void
	LANGUAGE C VOLATILE PARALLEL UNSAFE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_alter_route';

/* Everything about a route except secrets (which never live here anyway). */
CREATE OR REPLACE VIEW dpwin.routes AS
SELECT r.route_id,
	   r.route_name,
	   pg_catalog.pg_get_userbyid(r.owner) AS owner,
	   r.source_schema,
	   r.source_table,
	   r.columns,
	   r.window_column,
	   r.server_name,
	   r.target_database,
	   r.target_table,
	   r.lookback,
	   r.chunk_interval,
	   r.parallelism,
	   r.batch_rows,
	   r.max_encoded_bytes,
	   r.evidence_function,
	   r.skip_unchanged,
	   r.config_fingerprint,
	   s.last_interval_end,
	   r.created_at,
	   r.updated_at,
	   r.keep_backups,
	   coalesce(r.stale_after, r.lookback) AS stale_after
  FROM dpwin.route r
  LEFT JOIN dpwin.route_state s USING (route_id);

REVOKE ALL ON FUNCTION dpwin.create_route(text, regclass, name, name, text, text,
	interval, interval, integer, name[], integer, bigint, regprocedure, boolean,
	integer, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.alter_route(text, regclass, name, name, text, text,
	interval, interval, integer, name[], integer, bigint, regprocedure, boolean,
	integer, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dpwin.create_route(text, regclass, name, name, text, text,
	interval, interval, integer, name[], integer, bigint, regprocedure, boolean,
	integer, interval) TO dpwin_operator;
GRANT EXECUTE ON FUNCTION dpwin.alter_route(text, regclass, name, name, text, text,
	interval, interval, integer, name[], integer, bigint, regprocedure, boolean,
	integer, interval) TO dpwin_operator;














/* One row per backfill: the range, its windows, its state. */
CREATE TABLE dpwin.backfill (
	backfill_id			bigserial PRIMARY KEY,
	/* dpwin.drop_route() deletes the invocations first, then the route */
	route_id			integer NOT NULL REFERENCES dpwin.route ON DELETE CASCADE,
	range_from			timestamptz NOT NULL,
	range_to			timestamptz NOT NULL,
	/* the route's lookback when the backfill began: its windows' length */
	lookback			interval NOT NULL CHECK (lookback > interval '0'),
	windows				integer NOT NULL CHECK (windows >= 1),
	window_order		text NOT NULL DEFAULT 'newest_first'
		CHECK (window_order IN ('newest_first')),
	state				text NOT NULL CHECK (state IN (
		'running', 'completed', 'failed', 'abandoned')),
	calls				integer NOT NULL DEFAULT 1 CHECK (calls >= 1),
	current_window_end	timestamptz,
	error				text,
	error_sqlstate		text,
	caller_role			regrole NOT NULL,
	started_at			timestamptz NOT NULL DEFAULT clock_timestamp(),
	updated_at			timestamptz NOT NULL DEFAULT clock_timestamp(),
	finished_at			timestamptz,
	CHECK (range_from < range_to)
);
CREATE INDEX backfill_route_idx ON dpwin.backfill (route_id, state);

ALTER TABLE dpwin.invocation
	ADD CONSTRAINT invocation_backfill_id_fkey
	FOREIGN KEY (backfill_id) REFERENCES dpwin.backfill ON DELETE RESTRICT;
CREATE INDEX invocation_backfill_idx ON dpwin.invocation (backfill_id)
	WHERE backfill_id IS NOT NULL;

REVOKE ALL ON dpwin.backfill FROM PUBLIC;
REVOKE ALL ON SEQUENCE dpwin.backfill_backfill_id_seq FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('dpwin.backfill', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.backfill_backfill_id_seq', '');

/*
 * The session advisory lock a running backfill holds on its route, in
 * dpwin's key space: the class below is not the lease's, so a backfill
 * never holds the lease between its windows.
 */
CREATE FUNCTION dpwin.backfill_lock_class() RETURNS integer
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS 'SELECT 1146115906';

/* A timestamp as UTC text that reads back as the same instant, whatever TimeZone. */
CREATE FUNCTION dpwin.utc_text(t timestamptz) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp
	AS $$
	SELECT rtrim(rtrim(to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), '0'), '.') || '+00'
	$$;

/*
 * The windows of a backfill, newest first: k = 1 is [to - lookback, to).
 * Microsecond arithmetic, as the route's windows are: a day is 24 hours.
 */
CREATE FUNCTION dpwin.backfill_windows(backfill bigint)
	RETURNS TABLE (window_no integer, window_lo timestamptz, window_hi timestamptz,
				   published boolean)
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
	SELECT k, w.hi - b.lookback_us * interval '1 microsecond', w.hi,
		   EXISTS (SELECT 1
					 FROM dpwin.invocation i
					 JOIN dpwin.evidence e USING (invocation_id)
					WHERE i.route_id = b.route_id
					  AND i.interval_end = w.hi
					  AND i.window_lo = w.hi - b.lookback_us * interval '1 microsecond'
					  AND e.written_at >= b.started_at)
	  FROM (SELECT f.route_id, f.range_to, f.windows, f.started_at,
				   (extract(epoch FROM f.lookback) * 1000000)::bigint AS lookback_us
			  FROM dpwin.backfill f WHERE f.backfill_id = $1) b
	 CROSS JOIN LATERAL generate_series(1, b.windows) k
	 CROSS JOIN LATERAL (SELECT b.range_to - (k - 1) * b.lookback_us * interval '1 microsecond' AS hi) w
	 ORDER BY k
	$$;

/*
 * Admission of a backfill, before any I/O: the arguments, the route, the
 * tiling of the range by the route's lookback, the route not in use by
 * another running backfill.  Takes that session lock and returns the
 * backfill: the unfinished one of the same route, range and lookback
 * (resumed), or a new one.  Other unfinished backfills of the route are
 * abandoned: their backup falls under keep_backups again.
 */
CREATE FUNCTION dpwin.backfill_begin(route text, range_from timestamptz,
									 range_to timestamptz)
	RETURNS bigint
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	r			dpwin.route;
	lb_us		bigint;
	span_us		numeric;
	n			numeric;
	id			bigint;
BEGIN
	IF route IS NULL THEN
		RAISE EXCEPTION 'route must not be NULL' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF range_from IS NULL OR range_to IS NULL THEN
		RAISE EXCEPTION 'from and to must not be NULL'
			USING ERRCODE = 'null_value_not_allowed',
				  DETAIL = 'dpwin has no wall-clock fallback: a backfill publishes the windows of [from, to).';
	END IF;
	IF NOT isfinite(range_from) OR NOT isfinite(range_to) THEN
		RAISE EXCEPTION 'from and to must be finite, not [%, %)', range_from, range_to
			USING ERRCODE = 'datetime_field_overflow';
	END IF;
	IF range_from >= range_to THEN
		RAISE EXCEPTION 'from % is not before to %', range_from, range_to
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'A backfill publishes [from, to): pass the older bound first.';
	END IF;
	SELECT * INTO r FROM dpwin.route t WHERE t.route_name = backfill_begin.route;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'route "%" does not exist', route
			USING ERRCODE = 'undefined_object';
	END IF;

	lb_us := (extract(epoch FROM r.lookback) * 1000000)::bigint;
	span_us := extract(epoch FROM range_to - range_from) * 1000000;
	n := span_us / lb_us;
	IF n <> trunc(n) THEN
		RAISE EXCEPTION 'the lookback % of route "%" does not tile [%, %)',
				r.lookback, route, range_from, range_to
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('The range is %s, %s lookbacks; a backfill publishes whole windows of the route.',
								  range_to - range_from, round(n, 3)),
				  HINT = format('Pass from => %L (%s windows) or %L (%s windows).',
								dpwin.utc_text(range_to - ceil(n) * lb_us * interval '1 microsecond'),
								ceil(n),
								dpwin.utc_text(range_to - greatest(floor(n), 1) * lb_us * interval '1 microsecond'),
								greatest(floor(n), 1));
	END IF;
	IF range_from < timestamptz '1900-01-01 00:00:00+00'
	   OR range_to > timestamptz '2300-01-01 00:00:00+00' THEN
		RAISE EXCEPTION 'range [%, %) of route "%" is outside the range of ClickHouse DateTime64',
				range_from, range_to, route
			USING ERRCODE = 'datetime_field_overflow',
				  DETAIL = 'DateTime64 holds 1900-01-01 00:00:00 .. 2299-12-31 23:59:59.999999 UTC.';
	END IF;

	/* held by this session across the windows' commits, until backfill_end */
	IF NOT EXISTS (SELECT 1 FROM pg_locks
					WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database
																 WHERE datname = current_database())
					  AND classid = dpwin.backfill_lock_class()::oid AND objid = r.route_id::oid
					  AND objsubid = 2 AND pid = pg_backend_pid() AND granted)
	   AND NOT pg_try_advisory_lock(dpwin.backfill_lock_class(), r.route_id) THEN
		SELECT b.backfill_id INTO id FROM dpwin.backfill b
		 WHERE b.route_id = r.route_id AND b.state = 'running'
		 ORDER BY b.started_at DESC LIMIT 1;
		RAISE EXCEPTION 'route "%" is in use by backfill %', route, coalesce(id::text, '(starting)')
			USING ERRCODE = 'object_in_use',
				  HINT = 'Wait for it to finish (SELECT * FROM dpwin.backfills), or cancel it and CALL dpwin.backfill again to resume.';
	END IF;

	SELECT b.backfill_id INTO id FROM dpwin.backfill b
	 WHERE b.route_id = r.route_id AND b.state <> 'completed' AND b.state <> 'abandoned'
	   AND b.range_from = backfill_begin.range_from AND b.range_to = backfill_begin.range_to
	   AND b.lookback = r.lookback
	 ORDER BY b.started_at DESC LIMIT 1;
	UPDATE dpwin.backfill b
	   SET state = 'abandoned', updated_at = clock_timestamp(), finished_at = clock_timestamp()
	 WHERE b.route_id = r.route_id AND b.state IN ('running', 'failed')
	   AND b.backfill_id IS DISTINCT FROM id;
	IF id IS NOT NULL THEN
		UPDATE dpwin.backfill b
		   SET state = 'running', calls = b.calls + 1, error = NULL, error_sqlstate = NULL,
			   updated_at = clock_timestamp()
		 WHERE b.backfill_id = id;
	ELSE
		INSERT INTO dpwin.backfill (route_id, range_from, range_to, lookback, windows,
									state, caller_role)
		VALUES (r.route_id, range_from, range_to, r.lookback, n::integer, 'running',
				session_user::regrole)
		RETURNING backfill_id INTO id;
	END IF;
	RETURN id;
END
$$;

/*
 * What stands between a backfill and its next window: an invocation of the
 * backfill left unfinished (its caller or coordinator died), which must be
 * settled first.
 */
CREATE FUNCTION dpwin.backfill_unsettled(backfill bigint)
	RETURNS SETOF uuid
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
	SELECT i.invocation_id FROM dpwin.invocation i
	 WHERE i.backfill_id = $1
	   AND i.state NOT IN ('completed', 'failed', 'abandoned', 'snapshot_expired')
	 ORDER BY i.created_at
	$$;

/* The next window to publish, newest first; none once all are published. */
CREATE FUNCTION dpwin.backfill_next(backfill bigint,
	OUT window_no integer, OUT interval_end timestamptz)
	RETURNS SETOF record
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
	SELECT w.window_no, w.window_hi FROM dpwin.backfill_windows($1) w
	 WHERE NOT w.published ORDER BY w.window_no LIMIT 1
	$$;

/* Record the window a backfill is about to publish. */
CREATE FUNCTION dpwin.backfill_note(backfill bigint, interval_end timestamptz)
	RETURNS void
	LANGUAGE sql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
	UPDATE dpwin.backfill b SET current_window_end = $2, updated_at = clock_timestamp()
	 WHERE b.backfill_id = $1 AND b.state = 'running'
	$$;

/*
 * The end of a CALL: completed when every window is published, failed
 * with the error otherwise; the route's backfill lock is released.
 */
CREATE FUNCTION dpwin.backfill_end(backfill bigint, sqlstate text, message text)
	RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	rid			integer;
	st			text;
BEGIN
	st := CASE WHEN sqlstate IS NOT NULL THEN 'failed'
			   WHEN EXISTS (SELECT 1 FROM dpwin.backfill_windows(backfill_end.backfill) w
							 WHERE NOT w.published)
			   THEN 'failed' ELSE 'completed' END;
	UPDATE dpwin.backfill b
	   SET state = st, error = message, error_sqlstate = sqlstate,
		   current_window_end = CASE WHEN st = 'completed' THEN NULL ELSE b.current_window_end END,
		   updated_at = clock_timestamp(),
		   finished_at = CASE WHEN st = 'completed' THEN clock_timestamp() END
	 WHERE b.backfill_id = backfill_end.backfill
	RETURNING b.route_id INTO rid;
	/* taken once by backfill_begin, however many calls this session made */
	IF EXISTS (SELECT 1 FROM pg_locks
				WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database
															 WHERE datname = current_database())
				  AND classid = dpwin.backfill_lock_class()::oid AND objid = rid::oid
				  AND objsubid = 2 AND pid = pg_backend_pid() AND granted) THEN
		PERFORM pg_advisory_unlock(dpwin.backfill_lock_class(), rid);
	END IF;
	RETURN st;
END
$$;

/*
 * CALL dpwin.backfill(route, from, to): publish every window of the route's
 * lookback that tiles [from, to), newest first, each committed on its own
 * through the ordinary refresh (dpwin.backfill_window), and resume an
 * unfinished backfill of the same range.  A procedure without SET clauses:
 * those forbid COMMIT; every name is schema-qualified instead.
 */
CREATE PROCEDURE dpwin.backfill(route text, "from" timestamptz, "to" timestamptz)
	LANGUAGE plpgsql
	AS $$
DECLARE
	b			bigint;
	inv			uuid;
	next_end	timestamptz;
	done_end	timestamptz;
	e_state		text;
	e_message	text;
	e_detail	text;
	e_hint		text;
BEGIN
	b := dpwin.backfill_begin(route, "from", "to");
	COMMIT;
	LOOP
		/*
		 * The window recorded (and committed) last time round, then what
		 * comes next: errors of both are the backfill's.
		 */
		e_state := NULL;
		BEGIN
			IF next_end IS NOT NULL THEN
				PERFORM dpwin.backfill_window(route, next_end, b);
				done_end := next_end;
			END IF;
			/* an invocation a crash left unfinished is settled first */
			FOR inv IN SELECT u FROM dpwin.backfill_unsettled(b) u LOOP
				BEGIN
					PERFORM dpwin.recover(inv);
				EXCEPTION WHEN SQLSTATE '55000' THEN
					/* its snapshot expired before publication: settled */
					NULL;
				END;
			END LOOP;
			next_end := (SELECT n.interval_end FROM dpwin.backfill_next(b) n);
			IF next_end = done_end THEN
				RAISE EXCEPTION 'the window ending % of backfill % is not published after its refresh',
					next_end, b USING ERRCODE = 'internal_error';
			END IF;
		EXCEPTION WHEN OTHERS OR query_canceled THEN
			GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
				e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
		END;
		IF e_state IS NOT NULL THEN
			PERFORM dpwin.backfill_end(b, e_state, e_message);
			COMMIT;
			RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message,
				DETAIL = coalesce(nullif(e_detail, ''), format('Backfill %s stopped.', b)),
				HINT = coalesce(nullif(e_hint, '') || ' ', '')
					|| format('CALL dpwin.backfill(%L, %L, %L) resumes the backfill.',
							  route, "from", "to");
		END IF;
		EXIT WHEN next_end IS NULL;
		PERFORM dpwin.backfill_note(b, next_end);
		COMMIT;
	END LOOP;
	PERFORM dpwin.backfill_end(b, NULL, NULL);
	COMMIT;
END
$$;
COMMENT ON PROCEDURE dpwin.backfill(text, timestamptz, timestamptz) IS
	'publish every window of a route''s lookback that tiles [from, to), newest first, each committed on its own; a second call resumes';

/* One window of a backfill: the ordinary refresh, its invocation tied to the backfill. */
CREATE FUNCTION dpwin.backfill_window(route text, interval_end timestamptz, backfill bigint)
	RETURNS dpwin.refresh_result
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_backfill_window';

CREATE VIEW dpwin.backfills AS
	SELECT b.backfill_id, r.route_name,
		   CASE WHEN b.state = 'running' AND NOT EXISTS (
					SELECT 1 FROM pg_catalog.pg_locks l
					 WHERE l.locktype = 'advisory' AND l.classid = dpwin.backfill_lock_class()::oid
					   AND l.objid = b.route_id::oid AND l.objsubid = 2 AND l.granted
					   AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
										  WHERE d.datname = pg_catalog.current_database()))
				THEN 'interrupted' ELSE b.state END AS state,
		   b.range_from, b.range_to, b.lookback, b.window_order,
		   b.windows AS windows_total,
		   w.done AS windows_done,
		   CASE WHEN b.current_window_end IS NOT NULL AND w.done < b.windows
				THEN w.done + 1 END AS current_window,
		   b.current_window_end,
		   e.rows AS rows_done,
		   p.rows AS rows_current_window,
		   w.missing AS missing,
		   e.backup_table,
		   b.calls, b.error_sqlstate, b.error, b.caller_role AS caller,
		   b.started_at, b.updated_at, b.finished_at
	  FROM dpwin.backfill b
	  JOIN dpwin.route r USING (route_id)
	  CROSS JOIN LATERAL (
			SELECT count(*) FILTER (WHERE x.published)::integer AS done,
				   coalesce(pg_catalog.range_agg(pg_catalog.tstzrange(x.window_lo, x.window_hi))
							  FILTER (WHERE NOT x.published), '{}') AS missing
			  FROM dpwin.backfill_windows(b.backfill_id) x) w
	  CROSS JOIN LATERAL (
			SELECT sum((ev.metrics->>'source_rows')::bigint)::bigint AS rows,
				   (SELECT p1.backup_table FROM dpwin.publication p1
					  JOIN dpwin.invocation i1 USING (invocation_id)
					 WHERE i1.backfill_id = b.backfill_id AND p1.outcome = 'published'
					 ORDER BY p1.intent_at LIMIT 1) AS backup_table
			  FROM dpwin.invocation i
			  JOIN dpwin.evidence ev USING (invocation_id)
			 WHERE i.backfill_id = b.backfill_id) e
	  LEFT JOIN LATERAL (
			SELECT pr.rows FROM dpwin.progress_raw() pr
			  JOIN dpwin.invocation i2 USING (invocation_id)
			 WHERE i2.backfill_id = b.backfill_id LIMIT 1) p ON true;

/* dpwin.progress with the backfill a refresh belongs to: window k of n. */
CREATE OR REPLACE VIEW dpwin.progress AS
	SELECT p.invocation_id, r.route_name, p.pid, p.phase,
		   p.chunks_done, p.chunks_total, p.rows, p.bytes, p.started_at,
		   clock_timestamp() - p.started_at AS elapsed,
		   i.backfill_id,
		   bw.window_no AS backfill_window,
		   b.windows AS backfill_windows,
		   bw.rows_before + p.rows AS backfill_rows
	  FROM dpwin.progress_raw() p
	  LEFT JOIN dpwin.route r USING (route_id)
	  LEFT JOIN dpwin.invocation i USING (invocation_id)
	  LEFT JOIN dpwin.backfill b ON b.backfill_id = i.backfill_id
	  LEFT JOIN LATERAL (
			SELECT (SELECT x.window_no FROM dpwin.backfill_windows(b.backfill_id) x
					 WHERE x.window_hi = i.interval_end) AS window_no,
				   coalesce((SELECT sum((ev.metrics->>'source_rows')::bigint)
							   FROM dpwin.invocation i3
							   JOIN dpwin.evidence ev USING (invocation_id)
							  WHERE i3.backfill_id = b.backfill_id), 0)::bigint AS rows_before
			 WHERE b.backfill_id IS NOT NULL) bw ON true;

/*
 * Retention: the backups of a route to drop now, from the journal alone
 * (a backup that a later publication put back in place is no backup any
 * more, and is left out).
 *
 *   - a backfill's window that replaced the backfill's own previous
 *     generation (the table it replaced is the generation of an earlier
 *     window of the same backfill) drops it once that window is completed;
 *   - the other backups are kept newest first (by their publication), up to
 *     the route's keep_backups;
 *   - never a table that an unfinished invocation's publication names (its
 *     outcome may still need it), nor the one backup of a backfill that is
 *     not completed (the target as it was before the backfill).
 */
CREATE FUNCTION dpwin.backups_to_drop(route integer)
	RETURNS SETOF text
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, pg_temp
	AS $$
	WITH pubs AS (
		SELECT p.invocation_id, p.backup_table, p.generation_table, p.generation_uuid,
			   p.target_uuid_before, p.intent_at, p.outcome, p.backup_dropped_at,
			   i.state, i.backfill_id,
			   i.state NOT IN ('completed', 'failed', 'abandoned', 'snapshot_expired') AS unfinished
		  FROM dpwin.publication p
		  JOIN dpwin.invocation i USING (invocation_id)
		 WHERE i.route_id = $1
	), backfill_first AS (
		SELECT DISTINCT ON (backfill_id) backfill_id, backup_table
		  FROM pubs WHERE backfill_id IS NOT NULL AND outcome = 'published'
		 ORDER BY backfill_id, intent_at
	), protected AS (
		SELECT backup_table AS t FROM pubs WHERE unfinished
		UNION SELECT generation_table FROM pubs WHERE unfinished
		UNION SELECT f.backup_table FROM backfill_first f
				JOIN dpwin.backfill b USING (backfill_id) WHERE b.state <> 'completed'
	), candidates AS (
		SELECT c.backup_table, c.intent_at,
			   c.backfill_id IS NOT NULL AND EXISTS (
					SELECT 1 FROM pubs o
					 WHERE o.backfill_id = c.backfill_id AND o.outcome = 'published'
					   AND o.generation_uuid = c.target_uuid_before) AS replaced_own
		  FROM pubs c
		 WHERE c.outcome = 'published' AND c.state = 'completed' AND c.backup_dropped_at IS NULL
		   AND c.backup_table NOT IN (SELECT t FROM protected)
		   /* a backup a later publication put back (a rollback) is the target now */
		   AND c.backup_table NOT IN (SELECT g.generation_table FROM pubs g
									   WHERE g.outcome = 'published')
	), ranked AS (
		SELECT backup_table, replaced_own,
			   row_number() OVER (PARTITION BY replaced_own ORDER BY intent_at DESC) AS n
		  FROM candidates
	)
	SELECT backup_table FROM ranked
	 WHERE replaced_own
		OR n > (SELECT r.keep_backups FROM dpwin.route r WHERE r.route_id = $1)
	$$;
REVOKE ALL ON FUNCTION dpwin.backups_to_drop(integer) FROM PUBLIC;

/*
 * One row per route: is it fresh, failing, drifted, unresolved?  From the
 * catalog alone (docs/guide.md, "Monitoring").  Precedence of status:
 * unresolved > failing > drifted > stale > ok.
 */
CREATE VIEW dpwin.health AS
	SELECT r.route_name,
		   CASE WHEN u.unresolved > 0 THEN 'unresolved'
				WHEN f.consecutive > 0 THEN 'failing'
				WHEN v.drifted_chunks > 0 AND NOT coalesce(v.refreshed_since, false) THEN 'drifted'
				WHEN s.last_interval_end IS NULL
					 OR clock_timestamp() - s.last_interval_end > coalesce(r.stale_after, r.lookback)
				THEN 'stale'
				ELSE 'ok' END AS status,
		   s.last_interval_end,
		   s.updated_at AS last_published_at,
		   clock_timestamp() - s.last_interval_end AS data_age,
		   coalesce(r.stale_after, r.lookback) AS stale_after,
		   c.uncovered,
		   li.kind AS last_kind,
		   li.state AS last_state,
		   li.outcome AS last_outcome,
		   li.created_at AS last_invocation_at,
		   lf.error_sqlstate AS last_error_sqlstate,
		   lf.error AS last_error,
		   lf.updated_at AS last_failure_at,
		   f.consecutive AS consecutive_failures,
		   u.unresolved AS unresolved_invocations,
		   v.finished_at AS last_verified_at,
		   v.drifted_chunks,
		   k.backups AS backups_kept,
		   r.keep_backups,
		   bf.backfill_id AS backfill_in_progress,
		   bf.state AS backfill_state
	  FROM dpwin.route r
	  LEFT JOIN dpwin.route_state s USING (route_id)
	  CROSS JOIN LATERAL (
			SELECT tstzmultirange(tstzrange(min(i.window_lo), max(i.window_hi)))
				   - range_agg(tstzrange(i.window_lo, i.window_hi)) AS uncovered
			  FROM dpwin.invocation i
			  JOIN dpwin.evidence e USING (invocation_id)
			 /* a rollback publishes no window of its own */
			 WHERE i.route_id = r.route_id AND i.kind = 'refresh') c
	  LEFT JOIN LATERAL (
			SELECT i.kind, i.state, p.outcome, i.created_at
			  FROM dpwin.invocation i
			  LEFT JOIN dpwin.publication p USING (invocation_id)
			 WHERE i.route_id = r.route_id
			 ORDER BY i.created_at DESC LIMIT 1) li ON true
	  LEFT JOIN LATERAL (
			SELECT i.error_sqlstate, i.error, i.updated_at
			  FROM dpwin.invocation i
			 WHERE i.route_id = r.route_id AND i.error IS NOT NULL
			   AND i.state IN ('failed', 'snapshot_expired', 'unknown')
			 ORDER BY i.created_at DESC LIMIT 1) lf ON true
	  CROSS JOIN LATERAL (
			SELECT count(*)::integer AS consecutive
			  FROM dpwin.invocation i
			 WHERE i.route_id = r.route_id AND i.state IN ('failed', 'snapshot_expired')
			   AND i.created_at > coalesce((SELECT max(i2.created_at) FROM dpwin.invocation i2
											 WHERE i2.route_id = r.route_id
											   AND i2.state = 'completed'), '-infinity')) f
	  CROSS JOIN LATERAL (
			SELECT count(*)::integer AS unresolved
			  FROM dpwin.invocation i
			 WHERE i.route_id = r.route_id
			   AND (i.state = 'unknown'
					OR (i.state IN ('publishing', 'published', 'evidenced')
						/* the target's lease (lease.c): no coordinator holds it */
						AND NOT EXISTS (
							SELECT 1 FROM pg_catalog.pg_locks l
							 WHERE l.locktype = 'advisory' AND l.classid = 1146115913::oid
							   AND l.objid = i.target_id::oid AND l.objsubid = 2 AND l.granted
							   AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
												  WHERE d.datname = pg_catalog.current_database()))))) u
	  LEFT JOIN LATERAL (
			SELECT vv.finished_at, vv.drifting_chunks AS drifted_chunks,
				   EXISTS (SELECT 1 FROM dpwin.invocation i
							 JOIN dpwin.evidence e USING (invocation_id)
							WHERE i.route_id = r.route_id AND i.kind = 'refresh'
							  AND e.written_at > vv.finished_at
							  AND i.window_lo <= vv.window_lo AND i.window_hi >= vv.window_hi)
					 AS refreshed_since
			  FROM dpwin.verification vv
			 WHERE vv.route_id = r.route_id
			 ORDER BY vv.finished_at DESC LIMIT 1) v ON true
	  CROSS JOIN LATERAL (
			SELECT count(*)::integer AS backups
			  FROM dpwin.publication p
			  JOIN dpwin.invocation i USING (invocation_id)
			 WHERE i.route_id = r.route_id AND p.outcome = 'published'
			   AND p.backup_dropped_at IS NULL
			   AND NOT EXISTS (SELECT 1 FROM dpwin.publication g
								WHERE g.generation_table = p.backup_table
								  AND g.target_id = p.target_id AND g.outcome = 'published')) k
	  LEFT JOIN LATERAL (
			SELECT b.backfill_id, b.state
			  FROM dpwin.backfill b
			 WHERE b.route_id = r.route_id AND b.state IN ('running', 'failed')
			 ORDER BY b.started_at DESC LIMIT 1) bf ON true;

REVOKE ALL ON FUNCTION dpwin.utc_text(timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.backfill_lock_class() FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.backfill_windows(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.backfill_begin(text, timestamptz, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.backfill_unsettled(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.backfill_next(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.backfill_note(bigint, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.backfill_end(bigint, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.backfill_window(text, timestamptz, bigint) FROM PUBLIC;
REVOKE ALL ON PROCEDURE dpwin.backfill(text, timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dpwin.backfill_lock_class(), dpwin.backfill_windows(bigint),
	dpwin.backfill_begin(text, timestamptz, timestamptz), dpwin.backfill_unsettled(bigint),
	dpwin.backfill_next(bigint), dpwin.backfill_note(bigint, timestamptz),
	dpwin.backfill_end(bigint, text, text),
	dpwin.backfill_window(text, timestamptz, bigint) TO dpwin_operator;
GRANT EXECUTE ON PROCEDURE dpwin.backfill(text, timestamptz, timestamptz) TO dpwin_operator;
REVOKE ALL ON dpwin.backfills, dpwin.health FROM PUBLIC;
GRANT SELECT ON dpwin.backfills, dpwin.health TO dpwin_operator;

/* dpwin.rollback() (sql/install/45_rollback.sql) */
CREATE FUNCTION dpwin.rollback(route text, to_backup text DEFAULT NULL)
	RETURNS dpwin.refresh_result
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_rollback';
COMMENT ON FUNCTION dpwin.rollback(text, text) IS
	'put a kept backup (by default the route''s newest) back as the route''s target, with one journaled EXCHANGE; the replaced generation is kept as a backup';

REVOKE ALL ON FUNCTION dpwin.rollback(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dpwin.rollback(text, text) TO dpwin_operator;
