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
	caller_role			regrole NOT NULL,
	started_at			timestamptz NOT NULL,
	finished_at			timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX verification_route_idx ON dpwin.verification (route_id, interval_end);

CREATE VIEW dpwin.verifications AS
	SELECT v.verification_id, r.route_name, v.interval_end, v.window_lo, v.window_hi,
		   jsonb_array_length(v.chunks) AS chunks, v.drifting_chunks,
		   v.drifting_chunks = 0 AS matches, v.target_uuid, v.snapshot_id,
		   v.chunks AS chunk_results, v.caller_role AS caller,
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
SELECT pg_catalog.pg_extension_config_dump('dpwin.verification', '');
REVOKE ALL ON dpwin.verifications FROM PUBLIC;
GRANT SELECT ON dpwin.verifications TO dpwin_operator;
