/*-------------------------------------------------------------------------
 *
 * chprobe.c
 *	  The ClickHouse statements of the coordinator that no lower module
 *	  owns (chprobe.h).
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "utils/builtins.h"

#include "chprobe.h"

static char *
window_facts_sql(const DpwinTargetInfo *target, const char *database,
				 const char *table, const char *window_column,
				 TimestampTz lo, TimestampTz hi, const char *ranges_sql)
{
	char	   *w = dpwin_ch_quote_ident(window_column);
	char	   *tbl = dpwin_ch_qualified_name(database, table);
	char	   *inwin = dpwin_target_window_predicate(target, window_column, lo, hi);

	/*
	 * Every fact in one statement (one round trip), reading the window
	 * once: the rows of each UTC day with their lowest and highest value,
	 * and of them those inside the ranges.  The NULL-window rows, wherever
	 * they are, are counted apart, from the NULL map alone (a filter of "in
	 * the window or NULL" reads the whole column of every partition), and
	 * the table's rows from its parts' row counts and lightweight-delete
	 * masks.  PREWHERE, not WHERE: choosing what to move to PREWHERE costs
	 * the server about a millisecond per part, 0.25 s on a 300-partition
	 * target (docs/design.md, "The conversation with ClickHouse").
	 */
	return psprintf("SELECT toJSONString(CAST((arrayMap(x -> toString(x.1), _dpwin_days), arrayMap(x -> x.2, _dpwin_days))"
					" AS Tuple(days Array(String), rows Array(UInt64)))),"
					" toJSONString(CAST((toString(_dpwin_min), toString(_dpwin_max), _dpwin_rows,"
					" (SELECT count() FROM %s PREWHERE isNull(%s))) AS"
					" Tuple(min Nullable(String), max Nullable(String), window_rows UInt64, null_window_rows UInt64))),"
					" _dpwin_in, (SELECT count() FROM %s)"
					" FROM (SELECT arraySort(groupArray((assumeNotNull(_dpwin_d), _dpwin_n))) AS _dpwin_days,"
					" minOrNull(_dpwin_lo) AS _dpwin_min, maxOrNull(_dpwin_hi) AS _dpwin_max,"
					" sum(_dpwin_n) AS _dpwin_rows, sum(_dpwin_r) AS _dpwin_in"
					" FROM (SELECT toDate32(%s) AS _dpwin_d, count() AS _dpwin_n,"
					" countIf(%s) AS _dpwin_r, min(%s) AS _dpwin_lo, max(%s) AS _dpwin_hi"
					" FROM %s PREWHERE %s GROUP BY _dpwin_d))",
					tbl, w, tbl, w, ranges_sql ? ranges_sql : "1", w, w, tbl, inwin);
}

static void
window_facts_answer(char *answer, DpwinWindowFacts *facts)
{
	List	   *rows = dpwin_ch_parse_tsv(answer);
	List	   *row = rows != NIL ? (List *) linitial(rows) : NIL;

	if (list_length(rows) != 1 || list_length(row) != 4)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("unexpected answer from ClickHouse to the window's evidence query"),
				 errdetail("Expected one row with four columns, got %d rows.",
						   list_length(rows))));
	facts->days = pstrdup(dpwin_ch_row_field(row, 0));
	facts->bounds = pstrdup(dpwin_ch_row_field(row, 1));
	facts->ranges_rows = pg_strtoint64(dpwin_ch_row_field(row, 2));
	facts->rows = pg_strtoint64(dpwin_ch_row_field(row, 3));
}

void
dpwin_chprobe_window_facts(ChClient *client, const DpwinTargetInfo *target,
						   const char *database, const char *table,
						   const char *window_column, TimestampTz lo,
						   TimestampTz hi, DpwinWindowFacts *facts)
{
	window_facts_answer(dpwin_ch_exec(client,
									  window_facts_sql(target, database, table,
													   window_column, lo, hi, NULL)),
						facts);
}

void
dpwin_chprobe_window_facts_start(ChClient *client, const DpwinTargetInfo *target,
								 const char *database, const char *table,
								 const char *window_column, TimestampTz lo,
								 TimestampTz hi, const char *ranges_sql)
{
	dpwin_ch_start(client,
				   window_facts_sql(target, database, table, window_column, lo, hi,
									ranges_sql),
				   "facts");
}

void
dpwin_chprobe_window_facts_finish(ChClient *client, DpwinWindowFacts *facts)
{
	window_facts_answer(dpwin_ch_finish(client), facts);
}

int64
dpwin_chprobe_count(ChClient *client, const char *database, const char *table)
{
	char	   *n = dpwin_ch_scalar(client, psprintf("SELECT count() FROM %s",
													 dpwin_ch_qualified_name(database, table)));

	return strtoll(n, NULL, 10);
}

/*
 * A proxy in front of the server may run statements under ids of its own;
 * there a statement may still be queued or running, invisibly.  The probe
 * looks for itself.
 */
bool
dpwin_chprobe_query_ids_visible(ChClient *client)
{
	char	   *query_id = dpwin_ch_next_query_id(client, "probe-query-id");
	char	   *answer;

	answer = dpwin_ch_exec_id(client,
							  psprintf("SELECT count() FROM system.processes WHERE query_id = %s"
									   " FORMAT TabSeparated", dpwin_ch_quote_literal(query_id)),
							  query_id);
	return strtol(answer, NULL, 10) == 1;
}

/*
 * By query_id prefix, and by the table prefix in their text for servers
 * that do not keep a client's query_id.
 */
ChHttpStatus
dpwin_chprobe_settle(ChClient *client, const char *table_prefix)
{
	ChHttpReply reply;
	char	   *sql;

	sql = psprintf("KILL QUERY WHERE (startsWith(query_id, %s) OR position(query, %s) > 0)"
				   " AND query_id != queryID() SYNC FORMAT TabSeparated",
				   dpwin_ch_quote_literal(client->query_id_prefix),
				   dpwin_ch_quote_literal(table_prefix));
	return dpwin_ch_try(client, sql, dpwin_ch_next_query_id(client, "settle"), NULL, NULL, &reply);
}
