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
#include "nodes/params.h"
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

/*
 * Run the chunk's SELECT into `dest` under the exported snapshot.  The
 * executor hands each row to dest->receiveSlot as it produces it, so no
 * batch of rows is ever copied into an SPI tuple table and deformed again:
 * the receiver reads the scan's own slot (docs/design.md, "Extraction").
 * The plan is prepared without CURSOR_OPT_PARALLEL_OK, so that a chunk is
 * read by its worker alone and never asks for parallel workers of its own.
 */
void
dpwin_source_read(const DpwinRoute *route, const char *snapshot_name,
				  TimestampTz lo, TimestampTz hi, DestReceiver *dest)
{
	StringInfoData sql;
	Oid			argtypes[2] = {TIMESTAMPTZOID, TIMESTAMPTZOID};
	char	   *nspname;
	char	   *relname;
	SPIPlanPtr	plan;
	ParamListInfo params;
	SPIExecuteOptions options;
	int			rc;

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

	params = makeParamList(2);
	for (int i = 0; i < 2; i++)
	{
		params->params[i].value = TimestampTzGetDatum(i == 0 ? lo : hi);
		params->params[i].isnull = false;
		params->params[i].pflags = PARAM_FLAG_CONST;
		params->params[i].ptype = TIMESTAMPTZOID;
	}
	memset(&options, 0, sizeof(options));
	options.params = params;
	options.read_only = true;
	options.dest = dest;
	rc = SPI_execute_plan_extended(plan, &options);
	if (rc < 0)
		elog(ERROR, "SPI_execute_plan_extended failed for \"%s\": %s", sql.data,
			 SPI_result_code_string(rc));

	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
}
