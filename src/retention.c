/*-------------------------------------------------------------------------
 *
 * retention.c
 *	  Bounded backups (docs/design.md, "Backfill, retention and health").
 *
 *	  Which backups of a route go is decided from the journal alone, by
 *	  dpwin.backups_to_drop(): the newest keep_backups stay, a backfill
 *	  keeps one, and nothing an unfinished publication names is touched.
 *	  The coordinator asks once its invocation is completed, under the
 *	  lease, and drops the tables once the caller has its result.  A
 *	  dropped backup is journaled (publication.backup_dropped_at), so that
 *	  the next publication's decision needs no statement to ClickHouse.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "catalog.h"
#include "retention.h"
#include "target.h"

List *
dpwin_retention_plan(int32 route_id)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			types[1] = {INT4OID};
	Datum		args[1] = {Int32GetDatum(route_id)};
	List	   *tables = NIL;
	uint64		n;

	n = dpwin_catalog_exec("SELECT t FROM dpwin.backups_to_drop($1) t ORDER BY t",
						   1, types, args, NULL, true);
	for (uint64 i = 0; i < n; i++)
	{
		char	   *name = dpwin_catalog_text(i, 1);
		MemoryContext spi = MemoryContextSwitchTo(cxt);

		/* the list outlives SPI: its cells too */
		tables = lappend(tables, pstrdup(name));
		MemoryContextSwitchTo(spi);
	}
	MemoryContextSwitchTo(cxt);
	return tables;
}

void
dpwin_retention_drop(ChClient *client, const char *database, List *tables)
{
	if (tables != NIL)
		dpwin_target_drop_tables(client, database, tables);
}

void
dpwin_retention_mark_dropped(int32 route_id, List *tables)
{
	Oid			types[2] = {INT4OID, TEXTARRAYOID};
	Datum		args[2];
	Datum	   *names;
	ListCell   *lc;

	if (tables == NIL)
		return;
	names = palloc(sizeof(Datum) * list_length(tables));
	foreach(lc, tables)
		names[foreach_current_index(lc)] = CStringGetTextDatum(lfirst(lc));
	args[0] = Int32GetDatum(route_id);
	args[1] = PointerGetDatum(construct_array(names, list_length(tables), TEXTOID, -1, false, TYPALIGN_INT));
	dpwin_catalog_exec("UPDATE dpwin.publication p SET backup_dropped_at = pg_catalog.clock_timestamp()"
					   " FROM dpwin.invocation i"
					   " WHERE i.invocation_id = p.invocation_id AND i.route_id = $1"
					   " AND p.backup_table = ANY ($2) AND p.backup_dropped_at IS NULL",
					   2, types, args, NULL, false);
}
