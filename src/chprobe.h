/*-------------------------------------------------------------------------
 *
 * chprobe.h
 *	  The coordinator's own ClickHouse statements, which chprobe.c owns
 *	  because no lower module does: what the published target holds,
 *	  whether the server shows a client's query_id, and stopping the
 *	  statements of an invocation.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_CHPROBE_H
#define DPWIN_CHPROBE_H

#include "chclient.h"
#include "target.h"

/* What one read of a table's window says (dpwin_chprobe_window_facts()). */
typedef struct DpwinWindowFacts
{
	char	   *days;			/* the rows of each UTC day, JSON */
	char	   *bounds;			/* the window's bounds and rows, JSON */
	int64		ranges_rows;	/* rows inside ranges_sql (the window's when
								 * none was given) */
	int64		rows;			/* every row of the table */
} DpwinWindowFacts;

/*
 * UTC-day counts and window bounds of [lo, hi) in a table, as JSON
 * objects, with the rows inside ranges_sql (a predicate within the
 * window) and the table's rows (docs/design.md, "The conversation with
 * ClickHouse": one statement reads them all).  _start() sends the
 * statement and _finish() reads its answer, so that the client's caller
 * can work on another client meanwhile; dpwin_chprobe_window_facts() does
 * both, without ranges.
 */
extern void dpwin_chprobe_window_facts(ChClient *client,
									   const DpwinTargetInfo *target,
									   const char *database, const char *table,
									   const char *window_column,
									   TimestampTz lo, TimestampTz hi,
									   DpwinWindowFacts *facts);
extern void dpwin_chprobe_window_facts_start(ChClient *client,
											 const DpwinTargetInfo *target,
											 const char *database,
											 const char *table,
											 const char *window_column,
											 TimestampTz lo, TimestampTz hi,
											 const char *ranges_sql);
extern void dpwin_chprobe_window_facts_finish(ChClient *client,
											  DpwinWindowFacts *facts);

/* The number of rows of a table. */
extern int64 dpwin_chprobe_count(ChClient *client, const char *database,
								 const char *table);

/*
 * Does the server list statements under the query_id the client sent?
 * Only then does finding none in system.processes prove that a statement
 * has ended.
 */
extern bool dpwin_chprobe_query_ids_visible(ChClient *client);

/*
 * Stop and wait for every statement of an invocation: those whose
 * query_id starts with the client's prefix, or whose text names the
 * invocation's table prefix.  Returns the transport status.
 */
extern ChHttpStatus dpwin_chprobe_settle(ChClient *client, const char *table_prefix);

#endif							/* DPWIN_CHPROBE_H */
