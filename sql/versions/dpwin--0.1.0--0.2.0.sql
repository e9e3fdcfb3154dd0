/* dpwin — update from 0.1.0 to 0.2.0 (CHANGELOG.md)
 *
 * Relations and roles are stored as regclass and regrole, so that a dump
 * carries their names; the evidence function is stored as its qualified
 * signature (text), since pg_upgrade refuses regprocedure columns;
 * dpwin.verification is registered for pg_dump; and dpwin.server_conf(),
 * which only tests called, is dropped (the test module has its own).
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
	SELECT i.invocation_id, r.route_name, i.interval_end, i.window_lo, i.window_hi,
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
