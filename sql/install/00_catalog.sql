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
	/* regclass and regrole, not oid: a dump carries the names, and a
	 * restore into another database or cluster resolves them again */
	source_relid		regclass NOT NULL,
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
	/* the signature as text, schema-qualified, resolved at each use:
	 * pg_upgrade refuses regprocedure columns in user tables */
	evidence_function	text,
	skip_unchanged		boolean NOT NULL DEFAULT false,
	owner				regrole NOT NULL,
	config_fingerprint	text NOT NULL,
	created_at			timestamptz NOT NULL DEFAULT now(),
	updated_at			timestamptz NOT NULL DEFAULT now(),
	/* backups kept after each publication (docs/guide.md, "Retention") */
	keep_backups		integer NOT NULL DEFAULT 3 CHECK (keep_backups >= 1),
	/* dpwin.health's threshold of stale data; NULL: the lookback */
	stale_after			interval CHECK (stale_after > interval '0'),
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
	caller_role			regrole NOT NULL,
	created_at			timestamptz NOT NULL DEFAULT clock_timestamp(),
	updated_at			timestamptz NOT NULL DEFAULT clock_timestamp(),
	finished_at			timestamptz,
	/* a refresh publishes a window; a rollback puts a kept backup back */
	kind				text NOT NULL DEFAULT 'refresh'
		CHECK (kind IN ('refresh', 'rollback')),
	/* the backfill the invocation publishes a window of (40_operations.sql) */
	backfill_id			bigint,
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
	exchange_query_id	text,
	/* when retention or dpwin.drop_backups() dropped the backup */
	backup_dropped_at	timestamptz
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

/*
 * Every table is history or fencing state that a dump must carry whole, so
 * none has a filter: a restored lease epoch must never go backwards, and
 * recovery reads the journal of unfinished invocations.  dpwin.verification
 * registers itself in its own part.
 */
SELECT pg_catalog.pg_extension_config_dump('dpwin.route', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.route_route_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.lease', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.lease_target_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.invocation', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.chunk', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.publication', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.evidence', '');
SELECT pg_catalog.pg_extension_config_dump('dpwin.route_state', '');
