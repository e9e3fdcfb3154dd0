/* dpwin — test-only access to target admission (docs/admission.md)
 *
 * These expose target.c to SQL so that test/t/040_admission.t can check
 * each admission rule against a real ClickHouse.  They are not part of the
 * user interface: the leading underscore says so, and only superusers may
 * call them.
 */

/*
 * Admit the route's target as a refresh would (DESIGN.md §3 step 3) and
 * return what admission learned: uuid, engine_full, keys, columns, types,
 * window precision and nullability, schema fingerprint.  Each refusal is
 * the error a refresh would raise.  Writes nothing.
 */
CREATE FUNCTION dpwin._admit_target(route text) RETURNS jsonb
	LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin__admit_target';

/*
 * Probe EXCHANGE TABLES in the route's target database with two scratch
 * tables (_dpwin_probe_*), dropped afterwards.
 */
CREATE FUNCTION dpwin._probe_exchange(route text) RETURNS void
	LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin__probe_exchange';

/* The ClickHouse predicate selecting the target rows a refresh keeps. */
CREATE FUNCTION dpwin._keep_predicate(window_column text, nullable boolean,
									  lo timestamptz, hi timestamptz)
	RETURNS text
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE
	AS 'MODULE_PATHNAME', 'dpwin__keep_predicate';

REVOKE ALL ON FUNCTION dpwin._admit_target(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin._probe_exchange(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin._keep_predicate(text, boolean, timestamptz, timestamptz) FROM PUBLIC;
