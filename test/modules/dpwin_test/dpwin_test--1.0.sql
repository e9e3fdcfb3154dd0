/* dpwin_test — test-only SQL access to dpwin's internals.
 *
 * Installed by the test sandbox only.  Every function is revoked from
 * PUBLIC: only superusers may call them.
 */

\echo Use "CREATE EXTENSION dpwin_test" to load this file. \quit

/* dpwin — test-only functions of the RowBinary encoder and the digest
 *
 * These expose rowbinary.c and digest.c to SQL so that the encoder parity
 * test (test/t/020_rowbinary_parity.t) can compare dpwin's bytes with
 * ClickHouse's formatRow('RowBinary', ...).  They read no tables and have
 * no side effects; the leading underscore marks them as not part of the
 * user interface.
 */

/*
 * The RowBinary bytes of one value written as ClickHouse type ch_type (as
 * system.columns.type prints it).  A NULL for a type that is not Nullable
 * fails (22004) as it does during a refresh.  With window_value, fidelity
 * errors name the row by it, as they do during a refresh.
 */
CREATE FUNCTION dpwin_test.encode_rowbinary(value anyelement, ch_type text,
										window_value timestamptz DEFAULT NULL)
	RETURNS bytea
	LANGUAGE C STABLE PARALLEL SAFE
	AS 'MODULE_PATHNAME', 'dpwin__encode_rowbinary';

/* Reference SipHash-2-4 under key (k0, k1); the uint64 as two's complement. */
CREATE FUNCTION dpwin_test.siphash24(k0 bigint, k1 bigint, data bytea)
	RETURNS bigint
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE
	AS 'MODULE_PATHNAME', 'dpwin__siphash24';

/* Reference SipHash-2-4-128 under key (k0, k1): its 16 bytes in order. */
CREATE FUNCTION dpwin_test.siphash24_128(k0 bigint, k1 bigint, data bytea)
	RETURNS bytea
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE
	AS 'MODULE_PATHNAME', 'dpwin__siphash24_128';

/* NULL if a column of type typ(typmod) can be written as ch_type, else why not. */
CREATE FUNCTION dpwin_test.rb_type_parity(typ regtype, typmod integer,
									  ch_type text)
	RETURNS text
	LANGUAGE C STRICT STABLE PARALLEL SAFE
	AS 'MODULE_PATHNAME', 'dpwin__rb_type_parity';

/* The digest ("count:sum1:sum2") of RowBinary rows under key "k1a:k1b:k2a:k2b". */
CREATE FUNCTION dpwin_test.digest_rows(key text, rows bytea[])
	RETURNS text
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE
	AS 'MODULE_PATHNAME', 'dpwin__digest_rows';

/* The ClickHouse select-list computing the same digest over given columns. */
CREATE FUNCTION dpwin_test.digest_ch_select_list(key text, quoted_columns text)
	RETURNS text
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE
	AS 'MODULE_PATHNAME', 'dpwin__digest_ch_select_list';

/* dpwin — test-only access to the ClickHouse client (docs/transport.md)
 *
 * dpwin_test.ch_query(server, sql) runs one statement on a dpwin_clickhouse
 * foreign server with the caller's user mapping, through the same client
 * the refresh uses (same settings, same error mapping), and returns the
 * raw answer.  It exists for the test suite; it is not part of the user
 * interface and only superusers may call it.
 */

CREATE FUNCTION dpwin_test.ch_query(server name, sql text) RETURNS text
	LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin__ch_query';

REVOKE ALL ON FUNCTION dpwin_test.ch_query(name, text) FROM PUBLIC;

/*
 * dpwin_test.ch_query_started(server, sql, work_ms, poll, gate) starts the
 * statement, works work_ms (moving the statement on every 10 ms if poll)
 * and, with a gate other than 0, until the shared advisory lock of that
 * key is free, then waits for its answer, as a chunk worker does with a
 * staging digest.
 */
CREATE FUNCTION dpwin_test.ch_query_started(server name, sql text, work_ms integer,
											poll boolean DEFAULT true,
											gate bigint DEFAULT 0)
	RETURNS text
	LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin__ch_query_started';

REVOKE ALL ON FUNCTION dpwin_test.ch_query_started(name, text, integer, boolean, bigint) FROM PUBLIC;

/* dpwin — test-only access to target admission (docs/admission.md)
 *
 * These expose target.c to SQL so that test/t/040_admission.t can check
 * each admission rule against a real ClickHouse.  They are not part of the
 * user interface: the leading underscore says so, and only superusers may
 * call them.
 */

/*
 * Admit the route's target as a refresh would (docs/admission.md) and
 * return what admission learned: uuid, engine_full, keys, columns, types,
 * window precision and nullability, schema fingerprint.  Each refusal is
 * the error a refresh would raise.  Writes nothing.
 */
CREATE FUNCTION dpwin_test.admit_target(route text) RETURNS jsonb
	LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin__admit_target';

/*
 * Probe EXCHANGE TABLES in the route's target database with two scratch
 * tables (_dpwin_probe_*), dropped afterwards.
 */
CREATE FUNCTION dpwin_test.probe_exchange(route text) RETURNS void
	LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin__probe_exchange';

/*
 * Forget that EXCHANGE TABLES worked in a database of the server, so that
 * the next refresh there probes again (a restart of PostgreSQL does the
 * same for every database).
 */
CREATE FUNCTION dpwin_test.forget_exchange_probe(server name, database text) RETURNS void
	LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin__forget_exchange_probe';

REVOKE ALL ON FUNCTION dpwin_test.admit_target(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin_test.probe_exchange(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin_test.forget_exchange_probe(name, text) FROM PUBLIC;

/* dpwin — test-only access to the lease's fence (dpwin_test.c)
 *
 * Lets an isolation spec attempt a fenced journal write with any epoch
 * (test/isolation/specs/lease_fencing.spec); only superusers may call it.
 */

/*
 * The fence of a journal write, without the write: locks the lease row FOR
 * SHARE until commit and fails with 55P03 when epoch is stale.
 */
CREATE FUNCTION dpwin_test.fenced_write(target_id integer, epoch bigint) RETURNS void
	LANGUAGE C VOLATILE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin__fenced_write';

REVOKE ALL ON FUNCTION dpwin_test.fenced_write(integer, bigint) FROM PUBLIC;

/*
 * Copy foreign servers of the dpwin_clickhouse wrapper, with the caller's
 * user mapping, from database source_db of this cluster into the current
 * database, through dblink (which must be installed here).  Servers that
 * already exist are left alone.  pg_isolation_regress runs the specs in a
 * database of its own; they take the sandbox's servers (test/sandbox.sh)
 * from its database with this.
 */
CREATE FUNCTION dpwin_test.copy_servers(servers text[], source_db text DEFAULT 'dpwin_test')
	RETURNS void
	LANGUAGE plpgsql VOLATILE
	AS $fn$
DECLARE
	conn text := format('host=%s port=%s dbname=%s',
						split_part(current_setting('unix_socket_directories'), ',', 1),
						current_setting('port'), source_db);
	server text;
	srv text;
	um text;
BEGIN
	FOREACH server IN ARRAY servers
	LOOP
		CONTINUE WHEN EXISTS (SELECT 1 FROM pg_foreign_server WHERE srvname = server);
		EXECUTE format($q$
			SELECT t.srv, t.um FROM dblink(%L, %L) AS t(srv text, um text)$q$,
			conn, format($r$
			SELECT (SELECT string_agg(format('%%I %%L', split_part(o, '=', 1),
											 substr(o, strpos(o, '=') + 1)), ', ')
					  FROM unnest(s.srvoptions) o),
				   (SELECT string_agg(format('%%I %%L', split_part(o, '=', 1),
											 substr(o, strpos(o, '=') + 1)), ', ')
					  FROM unnest(m.umoptions) o)
			  FROM pg_foreign_server s
			  JOIN pg_user_mappings m ON m.srvid = s.oid AND m.usename = current_user
			 WHERE s.srvname = %L$r$, server))
			INTO srv, um;
		IF srv IS NULL THEN
			RAISE EXCEPTION 'database % has no foreign server %', source_db, server
				USING HINT = 'Start the sandbox with test/sandbox.sh start.';
		END IF;
		EXECUTE format('CREATE SERVER %I FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (%s)', server, srv);
		EXECUTE format('CREATE USER MAPPING FOR CURRENT_USER SERVER %I OPTIONS (%s)', server, um);
	END LOOP;
END
$fn$;

/* Superusers only, every one of them. */
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA dpwin_test FROM PUBLIC;

/*
 * What dpwin makes of a server and the caller's user mapping, without the
 * password (has_password says whether there is one).
 */
CREATE FUNCTION dpwin_test.server_conf(server name,
	OUT url text, OUT ca_file text, OUT verify_peer boolean,
	OUT connect_timeout_ms integer, OUT request_timeout_ms integer,
	OUT settings text, OUT "user" text, OUT has_password boolean)
	LANGUAGE C STRICT STABLE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin__server_conf';
REVOKE ALL ON FUNCTION dpwin_test.server_conf(name) FROM PUBLIC;
