/*-------------------------------------------------------------------------
 *
 * source.c
 *	  Exported snapshot and chunk cursors.
 *
 *	  The coordinator's REPEATABLE READ transaction exports its snapshot
 *	  and stays open for the whole extraction, which keeps the snapshot
 *	  importable.  Each worker imports it afresh for each chunk, as the
 *	  first thing its transaction does, so every chunk of the window is read
 *	  as of the same instant: nothing committed after the export is seen,
 *	  and no row is read twice or missed across chunks.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "source.h"

char *
dpwin_snapshot_export(void)
{
	char	   *name;

	StartTransactionCommand();
	XactIsoLevel = XACT_REPEATABLE_READ;
	XactReadOnly = true;
	name = ExportSnapshot(GetTransactionSnapshot());
	return name;
}

void
dpwin_snapshot_close(void)
{
	CommitTransactionCommand();
}

Portal
dpwin_source_open(const DpwinRoute *route, const char *snapshot_name,
				  TimestampTz lo, TimestampTz hi)
{
	StringInfoData sql;
	Oid			argtypes[2] = {TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		args[2];
	char	   *nspname;
	char	   *relname;
	SPIPlanPtr	plan;
	Portal		portal;

	StartTransactionCommand();
	XactIsoLevel = XACT_REPEATABLE_READ;
	XactReadOnly = true;
	ImportSnapshot(snapshot_name);
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());

	/* The relation by oid: a renamed source is still the route's source. */
	relname = get_rel_name(route->source_relid);
	if (relname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("source table of route \"%s\" no longer exists",
						route->route_name)));
	nspname = get_namespace_name(get_rel_namespace(route->source_relid));

	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT ");
	for (int i = 0; i < route->ncolumns; i++)
		appendStringInfo(&sql, "%s%s", i ? ", " : "",
						 quote_identifier(route->columns[i]));
	appendStringInfo(&sql, " FROM %s WHERE %s >= $1 AND %s < $2",
					 quote_qualified_identifier(nspname, relname),
					 quote_identifier(route->window_column),
					 quote_identifier(route->window_column));

	plan = SPI_prepare(sql.data, 2, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s", sql.data,
			 SPI_result_code_string(SPI_result));
	args[0] = TimestampTzGetDatum(lo);
	args[1] = TimestampTzGetDatum(hi);
	portal = SPI_cursor_open(NULL, plan, args, NULL, true);
	if (portal == NULL)
		elog(ERROR, "SPI_cursor_open failed: %s",
			 SPI_result_code_string(SPI_result));
	return portal;
}

uint64
dpwin_source_fetch(Portal portal, int batch_rows)
{
	if (SPI_tuptable)
	{
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
	}
	SPI_cursor_fetch(portal, true, batch_rows);
	return SPI_processed;
}

void
dpwin_source_close(Portal portal)
{
	SPI_cursor_close(portal);
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
}
