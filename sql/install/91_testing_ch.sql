/* dpwin — test-only access to the ClickHouse client (docs/transport.md)
 *
 * dpwin._ch_query(server, sql) runs one statement on a dpwin_clickhouse
 * foreign server with the caller's user mapping, through the same client
 * the refresh uses (same settings, same error mapping), and returns the
 * raw answer.  It exists for the test suite; it is not part of the user
 * interface and only superusers may call it.
 */

CREATE FUNCTION dpwin._ch_query(server name, sql text) RETURNS text
	LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin_ch_query';

REVOKE ALL ON FUNCTION dpwin._ch_query(name, text) FROM PUBLIC;
