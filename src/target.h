/*-------------------------------------------------------------------------
 *
 * target.h
 *	  The ClickHouse side of a refresh after admission (admission.h), which
 *	  target.c owns:
 *	  staging and generation tables, digests, window predicates, EXCHANGE
 *	  and UUID lookups.  Never reads PostgreSQL data.
 *
 *	  Every function runs ClickHouse statements through chclient and
 *	  ereports on failure; the coordinator holds the target's lease while
 *	  calling any function that mutates the target.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_TARGET_H
#define DPWIN_TARGET_H

#include "chclient.h"
#include "digest.h"
#include "route.h"
#include "window.h"

/* What admission learned about the target; compared again before EXCHANGE. */
typedef struct DpwinTargetInfo
{
	char	   *database;
	char	   *table;
	char	   *uuid;			/* system.tables.uuid */
	char	   *engine_full;
	char	   *partition_key;	/* "" when unpartitioned */
	char	   *sorting_key;
	int			ncolumns;
	char	  **column_names;	/* target order */
	char	  **column_types;	/* as system.columns.type prints them */
	int			window_precision;	/* p of DateTime64(p, 'UTC') */
	bool		window_nullable;
	char	   *schema_fingerprint; /* SHA-256 hex over names/types/engine */
	char	   *quoted_columns; /* "`a`, `b`, ..." in target order */
} DpwinTargetInfo;

/*
 * CREATE TABLE db.name AS db.target (same structure, engine, keys,
 * indices, settings), then check that the copy has target's columns and
 * types and, when target->engine_full is set, its engine_full: the target
 * may have changed since admission.  Only column_names/column_types/
 * ncolumns/database/table (and optionally engine_full) are read.  Returns
 * the copy's UUID (palloc'd), read in the same statement.
 */
extern char *dpwin_target_create_like(ChClient *client,
									  const DpwinTargetInfo *target,
									  const char *name);

/*
 * dpwin_target_create_like() in two halves, for a caller that checks the
 * copy later: CREATE TABLE db.name AS db.target alone, and the check alone,
 * which ereports with ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE when the
 * copy differs.  dpwin_target_check_copies() checks several copies in one
 * statement, with the same error for the first that differs (in the order
 * of names).
 */
extern void dpwin_target_create_unchecked(ChClient *client,
										  const DpwinTargetInfo *target,
										  const char *name);
extern char *dpwin_target_check_like(ChClient *client,
									 const DpwinTargetInfo *target,
									 const char *name);
extern void dpwin_target_check_copies(ChClient *client,
									  const DpwinTargetInfo *target,
									  List *names);

/*
 * dpwin_target_check_like() started on a client of its own while the
 * caller's works (dpwin_ch_start()), and its answer checked.
 */
extern void dpwin_target_check_like_start(ChClient *client,
										  const DpwinTargetInfo *target,
										  const char *name);
extern char *dpwin_target_check_like_finish(ChClient *client,
											const DpwinTargetInfo *target,
											const char *name);

/*
 * The active parts of the tables, one row each (partition_id, rows,
 * hash_of_all_files, table, min_block_number, max_block_number,
 * data_version, level), sorted by partition, rows and hash; and of such
 * rows, of `table` alone unless NULL, the layout fingerprint: what a merge
 * does not change and any other change of the rows does (target.c).
 */
extern char *dpwin_target_parts_sql(const char *database, List *tables);
extern char *dpwin_target_parts_layout(List *rows, const char *table);

/* DROP TABLE IF EXISTS db.name (the name is free at once; see target.c). */
extern void dpwin_target_drop_table(ChClient *client, const char *database,
									const char *name);

/* The same for a list of names, in one statement where the server can. */
extern void dpwin_target_drop_tables(ChClient *client, const char *database,
									 List *names);

/*
 * The same DROP of a list, started (dpwin_ch_start()) for a caller that
 * works meanwhile, and sent once: the caller waits for it with
 * dpwin_ch_finish_status() and drops what is left another way.
 */
extern void dpwin_target_drop_tables_start(ChClient *client, const char *database,
										   List *names);

/* Does db.name exist?  Its uuid (palloc'd) or NULL. */
extern char *dpwin_target_table_uuid(ChClient *client, const char *database,
									 const char *name);

/* The same for db.a and db.b, in one statement. */
extern void dpwin_target_table_uuids(ChClient *client, const char *database,
									 const char *a, const char *b,
									 char **uuid_a, char **uuid_b);

/*
 * Statements that select rows of a target-shaped table by the window
 * column or by _partition_id run with optimize_move_to_prewhere = 0: with
 * the automatic move to PREWHERE the server weighs every part of the table
 * (about a millisecond each, more on parts it has not read yet) before the
 * condition drops the parts it excludes (docs/design.md, "The
 * conversation with ClickHouse").
 */
#define DPWIN_TARGET_SCAN_SETTINGS "optimize_move_to_prewhere = 0"

/*
 * Digest of db.table restricted by where_sql (NULL: all rows), computed by
 * ClickHouse over formatRow('RowBinary', target columns); settings (or
 * NULL) is the statement's SETTINGS clause.
 */
extern void dpwin_target_digest(ChClient *client, const DpwinTargetInfo *target,
								const char *table, const char *where_sql,
								const char *settings, const DpwinDigestKey *key,
								DpwinDigest *out);

/*
 * Digest of all of db.table, a copy made by dpwin_target_create_unchecked()
 * (whose structure dpwin_target_check_copies() checks before its parts are
 * used); also_sql (or NULL) adds nalso columns of the same read, whose
 * values _finish() returns (NULL for a NULL).  The statement is started
 * (dpwin_ch_start()) and its answer read later, so that the caller works
 * while ClickHouse digests: nothing else may use the client in between.
 */
extern void dpwin_target_digest_like_start(ChClient *client,
										   const DpwinTargetInfo *target,
										   const char *table,
										   const DpwinDigestKey *key,
										   const char *also_sql);
extern List *dpwin_target_digest_like_finish(ChClient *client,
											 const DpwinTargetInfo *target,
											 const char *table, int nalso,
											 DpwinDigest *out);

/*
 * The expression that numbers a row's chunk among chunks (a List of
 * DpwinChunkBounds: a window's chunks, as dpwin_window_chunks() makes
 * them), from 1; NULL when they are not one width end to end.
 */
extern char *dpwin_target_chunk_index_sql(const char *window_column,
										  List *chunks);

/*
 * Digest of the rows of db.table in each chunk (a List of
 * DpwinChunkBounds: a window's chunks, as dpwin_window_chunks() makes
 * them), all in one statement: out[i]
 * for chunk i, empty for a chunk without rows.
 */
extern void dpwin_target_chunk_digests(ChClient *client,
									   const DpwinTargetInfo *target,
									   const char *table,
									   const char *window_column,
									   List *chunks, const DpwinDigestKey *key,
									   DpwinDigest *out);

/* A window bound as an exact DateTime64(6, 'UTC') ClickHouse expression. */
extern char *dpwin_target_bound_sql(TimestampTz ts, const char *what);

/* The complement: rows with the window value in [lo, hi). */
extern char *dpwin_target_window_predicate(const DpwinTargetInfo *target,
										   const char *window_column,
										   TimestampTz lo, TimestampTz hi);

/*
 * EXCHANGE TABLES db.target AND db.generation under query_id.  Returns the
 * transport status without raising, so that the coordinator can reconcile
 * by UUIDs after a lost reply.
 */
extern ChHttpStatus dpwin_target_exchange(ChClient *client,
										  const DpwinTargetInfo *target,
										  const char *generation,
										  const char *query_id,
										  ChHttpReply *reply);

/*
 * RENAME TABLE db.from TO db.to under query_id; returns the status
 * instead of raising, as dpwin_ch_try() (the caller settles a lost reply).
 */
extern ChHttpStatus dpwin_target_rename(ChClient *client, const char *database,
										const char *from, const char *to,
										const char *query_id, ChHttpReply *reply);

/* List table names in database starting with prefix. */
extern List *dpwin_target_list_tables(ChClient *client, const char *database,
									  const char *prefix);

/*
 * The same listing, started (dpwin_ch_start()) for a caller that works
 * meanwhile, and sent once; _finish() waits for it and returns false when
 * it failed, for the caller to list another way.
 */
extern void dpwin_target_list_tables_start(ChClient *client, const char *database,
										   const char *prefix);
extern bool dpwin_target_list_tables_finish(ChClient *client, List **names);

#endif							/* DPWIN_TARGET_H */
