/* dpwin — rollback of a route's target to a kept backup
 * (docs/design.md, "Rolling back a generation") */

CREATE FUNCTION dpwin.rollback(route text, to_backup text DEFAULT NULL)
	RETURNS dpwin.refresh_result
	LANGUAGE C CALLED ON NULL INPUT VOLATILE
	SET search_path = pg_catalog, pg_temp
	AS 'MODULE_PATHNAME', 'dpwin_rollback';
COMMENT ON FUNCTION dpwin.rollback(text, text) IS
	'put a kept backup (by default the route''s newest) back as the route''s target, with one journaled EXCHANGE; the replaced generation is kept as a backup';

REVOKE ALL ON FUNCTION dpwin.rollback(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dpwin.rollback(text, text) TO dpwin_operator;
