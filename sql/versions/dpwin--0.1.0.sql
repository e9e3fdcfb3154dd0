/* dpwin — catalog (docs/design.md, "The catalog")
 *
 * The extension script is assembled from the files of sql/install, in name
 * order.
 * This part owns the schema's tables; every other part adds functions.
 *
 * Ordinary roles never write these tables: the functions that mutate them
 * run the writes as the extension's owner with a fixed search_path.
 */

\echo Use "CREATE EXTENSION dpwin" to load this file. \quit

CREATE FUNCTION dpwin.version() RETURNS text
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE
	AS 'MODULE_PATHNAME', 'dpwin_version';

DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'dpwin_operator') THEN
		CREATE ROLE dpwin_operator NOLOGIN;
	END IF;
END
$$;

/* One row per route: what to read, where to publish, how to cut the window. */
CREATE TABLE dpwin.route (
	route_id			serial PRIMARY KEY,
	route_name			text NOT NULL UNIQUE
		CHECK (route_name ~ '^[A-Za-z_][A-Za-z0-9_$.-]{0,62}$'),
	source_relid		oid NOT NULL,
	source_schema		name NOT NULL,
	source_table		name NOT NULL,
	columns				name[] NOT NULL CHECK (cardinality(columns) BETWEEN 1 AND 1600),
	window_column		name NOT NULL,
	server_name			name NOT NULL,
	target_database		text NOT NULL CHECK (target_database <> ''),
	target_table		text NOT NULL CHECK (target_table <> ''),
	lookback			interval NOT NULL,
	chunk_interval		interval NOT NULL,
	parallelism			integer NOT NULL DEFAULT 1 CHECK (parallelism BETWEEN 1 AND 64),
	batch_rows			integer NOT NULL DEFAULT 8192 CHECK (batch_rows BETWEEN 1 AND 1000000),
	max_encoded_bytes	bigint NOT NULL DEFAULT 4194304
		CHECK (max_encoded_bytes BETWEEN 65536 AND 268435456),
	evidence_function	regprocedure,
	skip_unchanged		boolean NOT NULL DEFAULT false,
	owner				oid NOT NULL,
	config_fingerprint	text NOT NULL,
	created_at			timestamptz NOT NULL DEFAULT now(),
	updated_at			timestamptz NOT NULL DEFAULT now(),
	CHECK (window_column = ANY (columns)),
	CHECK (lookback > interval '0' AND chunk_interval > interval '0'),
	CHECK (chunk_interval <= lookback)
);

/* Fencing epochs, one row per ClickHouse target (server, database, table).
 * target_id is the second key of the target's advisory lock. */
CREATE TABLE dpwin.lease (
	target_id			serial PRIMARY KEY,
	server_name			name NOT NULL,
	target_database		text NOT NULL,
	target_table		text NOT NULL,
	epoch				bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
	holder_pid			integer,
	holder_invocation	uuid,
	acquired_at			timestamptz,
	UNIQUE (server_name, target_database, target_table)
);

/* The invocation registry; plan is immutable once persisted. */
CREATE TABLE dpwin.invocation (
	invocation_id		uuid PRIMARY KEY,
	route_id			integer NOT NULL REFERENCES dpwin.route ON DELETE RESTRICT,
	target_id			integer NOT NULL REFERENCES dpwin.lease,
	interval_end		timestamptz NOT NULL,
	window_lo			timestamptz NOT NULL,
	window_hi			timestamptz NOT NULL,
	plan				jsonb,
	plan_fingerprint	text,
	config_fingerprint	text NOT NULL,
	schema_fingerprint	text,
	snapshot_id			text,
	lease_epoch			bigint NOT NULL,
	state				text NOT NULL CHECK (state IN (
		'planned', 'extracting', 'staged', 'verified', 'publishing',
		'published', 'evidenced', 'completed',
		'failed', 'abandoned', 'snapshot_expired', 'unknown')),
	error				text,
	error_sqlstate		text,
	result				jsonb,
	caller_role			oid NOT NULL,
	created_at			timestamptz NOT NULL DEFAULT clock_timestamp(),
	updated_at			timestamptz NOT NULL DEFAULT clock_timestamp(),
	finished_at			timestamptz,
	CHECK (window_lo < window_hi AND window_hi = interval_end)
);
CREATE INDEX invocation_route_idx ON dpwin.invocation (route_id, created_at);
CREATE INDEX invocation_target_idx ON dpwin.invocation (target_id, state);

/* The chunk journal: one row per chunk, the attempt that owns it now. */
CREATE TABLE dpwin.chunk (
	invocation_id		uuid NOT NULL REFERENCES dpwin.invocation ON DELETE CASCADE,
	chunk_no			integer NOT NULL CHECK (chunk_no >= 0),
	lo					timestamptz NOT NULL,
	hi					timestamptz NOT NULL,
	attempt				integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
	state				text NOT NULL DEFAULT 'pending' CHECK (state IN (
		'pending', 'running', 'verified', 'skipped', 'failed', 'fenced')),
	staging_table		text,
	rows				bigint,
	bytes				bigint,
	digest				text,
	lease_epoch			bigint,
	worker_pid			integer,
	started_at			timestamptz,
	finished_at			timestamptz,
	error				text,
	PRIMARY KEY (invocation_id, chunk_no),
	CHECK (lo < hi)
);

/* Publication intent, committed before EXCHANGE, and its observed outcome. */
CREATE TABLE dpwin.publication (
	invocation_id		uuid PRIMARY KEY REFERENCES dpwin.invocation ON DELETE CASCADE,
	target_id			integer NOT NULL REFERENCES dpwin.lease,
	target_uuid_before	uuid NOT NULL,
	generation_table	text NOT NULL,
	generation_uuid		uuid NOT NULL,
	backup_table		text NOT NULL,
	lease_epoch			bigint NOT NULL,
	intent_at			timestamptz NOT NULL DEFAULT clock_timestamp(),
	outcome				text CHECK (outcome IN ('published', 'not_published', 'unknown')),
	observed_at			timestamptz,
	exchange_query_id	text
);

/* Durable evidence: one row per published invocation. */
CREATE TABLE dpwin.evidence (
	invocation_id		uuid PRIMARY KEY REFERENCES dpwin.invocation ON DELETE CASCADE,
	route_id			integer NOT NULL REFERENCES dpwin.route ON DELETE RESTRICT,
	lease_epoch			bigint NOT NULL,
	metrics				jsonb NOT NULL,
	written_at			timestamptz NOT NULL DEFAULT clock_timestamp()
);

/* Last published interval_end per route; moved only forward, by CAS. */
CREATE TABLE dpwin.route_state (
	route_id			integer PRIMARY KEY REFERENCES dpwin.route ON DELETE CASCADE,
	last_interval_end	timestamptz NOT NULL,
	invocation_id		uuid NOT NULL,
	updated_at			timestamptz NOT NULL DEFAULT clock_timestamp()
);

REVOKE ALL ON ALL TABLES IN SCHEMA dpwin FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA dpwin FROM PUBLIC;
GRANT USAGE ON SCHEMA dpwin TO PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('dpwin.route', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.route_route_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.lease', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.lease_target_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.invocation', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.chunk', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.publication', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.evidence', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.route_state', '');
/* dpwin — ClickHouse servers, routes and window planning (docs/guide.md)
 *
 * A ClickHouse endpoint is a foreign server of the dpwin_clickhouse
 * wrapper; its user and password live in a user mapping, as with
 * postgres_fdw, and nothing in schema dpwin repeats them.
 *
 * The route functions are C (route.c): they check every privilege as the
 * caller and write dpwin.route as the extension's owner.
 */

CREATE FUNCTION dpwin.dpwin_clickhouse_validator(text[], oid) RETURNS void
	LANGUAGE C STRICT
	AS 'MODULE_PATHNAME', 'dpwin_clickhouse_validator';

-- No handler: the wrapper names endpoints, it does not provide foreign tables.
CREATE FOREIGN DATA WRAPPER dpwin_clickhouse
	VALIDATOR dpwin.dpwin_clickhouse_validator;

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
	skip_unchanged		boolean DEFAULT false)
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
	skip_unchanged		boolean DEFAULT NULL)
	RETURNS void
	LANGUAGE C VOLATILE PARALLEL UNSAFE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_alter_route';

CREATE FUNCTION dpwin.drop_route(route_name text)
	RETURNS void
	LANGUAGE C VOLATILE PARALLEL UNSAFE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_drop_route';

/*
 * Window planning.  Not STRICT: a NULL interval_end is an error ("no
 * wall-clock fallback"), not an empty result.
 */
CREATE FUNCTION dpwin.plan(route text, interval_end timestamptz)
	RETURNS TABLE (chunk_no integer, lo timestamptz, hi timestamptz)
	LANGUAGE C STABLE PARALLEL UNSAFE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_plan';

/*
 * These two only refuse.  Without them a timestamp or a date would be cast
 * to timestamptz in the session's TimeZone.  An untyped literal still
 * resolves to the timestamptz version: timestamptz is the preferred type
 * of the datetime category.
 */
CREATE FUNCTION dpwin.plan(route text, interval_end timestamp)
	RETURNS TABLE (chunk_no integer, lo timestamptz, hi timestamptz)
	LANGUAGE C STABLE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin_plan_naive';

CREATE FUNCTION dpwin.plan(route text, interval_end date)
	RETURNS TABLE (chunk_no integer, lo timestamptz, hi timestamptz)
	LANGUAGE C STABLE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin_plan_naive';

CREATE FUNCTION dpwin.plan_window(interval_end timestamptz, lookback interval,
								  chunk_interval interval)
	RETURNS TABLE (chunk_no integer, lo timestamptz, hi timestamptz)
	LANGUAGE C IMMUTABLE PARALLEL SAFE
	AS 'MODULE_PATHNAME', 'dpwin_plan_window';

/* Everything about a route except secrets (which never live here anyway). */
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

REVOKE ALL ON FUNCTION dpwin.create_route(text, regclass, name, name, text, text,
	interval, interval, integer, name[], integer, bigint, regprocedure, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.alter_route(text, regclass, name, name, text, text,
	interval, interval, integer, name[], integer, bigint, regprocedure, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin.drop_route(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dpwin.create_route(text, regclass, name, name, text, text,
	interval, interval, integer, name[], integer, bigint, regprocedure, boolean) TO dpwin_operator;
GRANT EXECUTE ON FUNCTION dpwin.alter_route(text, regclass, name, name, text, text,
	interval, interval, integer, name[], integer, bigint, regprocedure, boolean) TO dpwin_operator;
GRANT EXECUTE ON FUNCTION dpwin.drop_route(text) TO dpwin_operator;

REVOKE ALL ON dpwin.routes FROM PUBLIC;
GRANT SELECT ON dpwin.routes TO dpwin_operator;

/*
 * What dpwin makes of a server and the caller's user mapping, without the
 * password (has_password says whether there is one).  Superusers only.
 */
CREATE FUNCTION dpwin.server_conf(server name,
	OUT url text, OUT ca_file text, OUT verify_peer boolean,
	OUT connect_timeout_ms integer, OUT request_timeout_ms integer,
	OUT settings text, OUT "user" text, OUT has_password boolean)
	LANGUAGE C STRICT STABLE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin_show_server_conf';
REVOKE ALL ON FUNCTION dpwin.server_conf(name) FROM PUBLIC;
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
	SELECT i.invocation_id, r.route_name, i.interval_end, i.window_lo, i.window_hi,
		   i.state, i.error, i.error_sqlstate, i.lease_epoch, i.snapshot_id,
		   p.outcome AS publication_outcome, p.backup_table,
		   (SELECT count(*) FROM dpwin.chunk c WHERE c.invocation_id = i.invocation_id)::integer AS chunks,
		   (SELECT count(*) FROM dpwin.chunk c WHERE c.invocation_id = i.invocation_id
				AND c.state = 'verified')::integer AS chunks_verified,
		   i.caller_role::regrole AS caller,
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
/* dpwin — verification: is the copy of a window still right? (docs/guide.md) */

/*
 * One row per dpwin.verify() call: what was compared (the snapshot of the
 * source, the UUID of the target table read) and, per chunk, the rows on
 * both sides and whether their typed multiset digests match.
 */
CREATE TABLE dpwin.verification (
	verification_id		uuid PRIMARY KEY,
	route_id			integer NOT NULL REFERENCES dpwin.route ON DELETE CASCADE,
	interval_end		timestamptz NOT NULL,
	window_lo			timestamptz NOT NULL,
	window_hi			timestamptz NOT NULL,
	snapshot_id			text,
	target_uuid			uuid,
	chunks				jsonb NOT NULL,
	drifting_chunks		integer NOT NULL CHECK (drifting_chunks >= 0),
	caller_role			oid NOT NULL,
	started_at			timestamptz NOT NULL,
	finished_at			timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX verification_route_idx ON dpwin.verification (route_id, interval_end);

CREATE VIEW dpwin.verifications AS
	SELECT v.verification_id, r.route_name, v.interval_end, v.window_lo, v.window_hi,
		   jsonb_array_length(v.chunks) AS chunks, v.drifting_chunks,
		   v.drifting_chunks = 0 AS matches, v.target_uuid, v.snapshot_id,
		   v.chunks AS chunk_results, v.caller_role::regrole AS caller,
		   v.started_at, v.finished_at, v.finished_at - v.started_at AS duration
	  FROM dpwin.verification v
	  JOIN dpwin.route r USING (route_id);

CREATE FUNCTION dpwin.verify(route text, interval_end timestamptz)
	RETURNS TABLE (chunk_no integer, lo timestamptz, hi timestamptz,
				   source_rows bigint, target_rows bigint, matches boolean)
	LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_verify';
COMMENT ON FUNCTION dpwin.verify(text, timestamptz) IS
	'compare a window of a route''s source with its ClickHouse target, chunk by chunk, writing nothing to ClickHouse';

/* These only refuse, as the matching dpwin.plan() overloads do. */
CREATE FUNCTION dpwin.verify(route text, interval_end timestamp)
	RETURNS TABLE (chunk_no integer, lo timestamptz, hi timestamptz,
				   source_rows bigint, target_rows bigint, matches boolean)
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	AS 'MODULE_PATHNAME', 'dpwin_plan_naive';
CREATE FUNCTION dpwin.verify(route text, interval_end date)
	RETURNS TABLE (chunk_no integer, lo timestamptz, hi timestamptz,
				   source_rows bigint, target_rows bigint, matches boolean)
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	AS 'MODULE_PATHNAME', 'dpwin_plan_naive';

REVOKE ALL ON FUNCTION dpwin.verify(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dpwin.verify(text, timestamptz) TO dpwin_operator;
REVOKE ALL ON dpwin.verification FROM PUBLIC;
REVOKE ALL ON dpwin.verifications FROM PUBLIC;
GRANT SELECT ON dpwin.verifications TO dpwin_operator;
