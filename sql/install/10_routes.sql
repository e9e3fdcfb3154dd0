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
REVOKE ALL ON FUNCTION dpwin.drop_route(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dpwin.create_route(text, regclass, name, name, text, text,
	interval, interval, integer, name[], integer, bigint, regprocedure, boolean,
	integer, interval) TO dpwin_operator;
GRANT EXECUTE ON FUNCTION dpwin.alter_route(text, regclass, name, name, text, text,
	interval, interval, integer, name[], integer, bigint, regprocedure, boolean,
	integer, interval) TO dpwin_operator;
GRANT EXECUTE ON FUNCTION dpwin.drop_route(text) TO dpwin_operator;

REVOKE ALL ON dpwin.routes FROM PUBLIC;
GRANT SELECT ON dpwin.routes TO dpwin_operator;
