/*-------------------------------------------------------------------------
 *
 * target.c
 *	  The ClickHouse side of a refresh after admission: staging and
 *	  generation tables, digests, window predicates, EXCHANGE and UUID
 *	  lookups.  Never reads PostgreSQL data.
 *
 *	  Every statement goes through chclient; every identifier is quoted
 *	  with dpwin_ch_quote_ident() and every string with dpwin_ch_quote_literal(), so
 *	  names with quotes, backticks, semicolons or any UTF-8 are safe.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "target.h"

#include "common/int.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

static void digest_answer(char *answer, const DpwinTargetInfo *target,
						  const char *table, DpwinDigest *out);

/* ----------------------------------------------------------------------
 * Tables
 * ----------------------------------------------------------------------
 */

/*
 * The error for a copy whose structure is not the target's as admission
 * saw it.
 */
pg_noreturn static void
clone_changed(const DpwinTargetInfo *target, const char *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("ClickHouse target %s changed since it was admitted",
					dpwin_ch_qualified_name(target->database, target->table)),
			 errdetail("Its copy %s has a different engine definition or columns.",
					   dpwin_ch_qualified_name(target->database, name)),
			 errhint("The copy is left in place; drop it, and run the refresh again.")));
}

char *
dpwin_target_create_like(ChClient *client, const DpwinTargetInfo *target,
						 const char *name)
{
	dpwin_target_create_unchecked(client, target, name);

	/*
	 * CREATE TABLE AS copies the target as it is now; make sure that is still
	 * what admission saw, or the generation would not match it.
	 */
	return dpwin_target_check_like(client, target, name);
}

void
dpwin_target_create_unchecked(ChClient *client, const DpwinTargetInfo *target,
							  const char *name)
{
	dpwin_ch_exec(client, psprintf("CREATE TABLE %s AS %s",
								   dpwin_ch_qualified_name(target->database, name),
								   dpwin_ch_qualified_name(target->database, target->table)));
}

/*
 * The catalog's rows of the tables `names` of the target's database: for
 * each (in name order), its row (position 0: 'T', engine_full, its UUID),
 * then its columns (name, type) in position order.
 */
static char *
copies_sql(const DpwinTargetInfo *target, List *names)
{
	char	   *ldb = dpwin_ch_quote_literal(target->database);
	char	   *in = dpwin_ch_quote_literal_list(names);

	return psprintf("SELECT * FROM (SELECT name AS t, 'T', engine_full, toUInt64(0) AS pos, toString(uuid) FROM system.tables WHERE database = %s AND name IN %s\n"
					"UNION ALL SELECT `table`, name, type, position, '' FROM system.columns WHERE database = %s AND `table` IN %s)"
					" ORDER BY t, pos",
					ldb, in, ldb, in);
}

static List *
copies_rows(ChClient *client, const DpwinTargetInfo *target, List *names)
{
	return dpwin_ch_parse_tsv(dpwin_ch_exec(client, copies_sql(target, names)));
}

/*
 * Raise the check's error unless copies_rows() show the copy `name` with
 * the target's engine_full and exactly its columns and types in order (a
 * worker's copy of the target info may lack engine_full: then only the
 * columns count).  Returns the copy's UUID.
 */
static char *
copy_check(const DpwinTargetInfo *target, List *rows, const char *name)
{
	const char *engine_full = NULL;
	const char *uuid = NULL;
	int			ncolumns = 0;
	bool		same = true;
	ListCell   *lc;

	foreach(lc, rows)
	{
		List	   *row = (List *) lfirst(lc);

		if (list_length(row) != 5 || strcmp(dpwin_ch_row_field(row, 0), name) != 0)
			continue;
		if (strcmp(dpwin_ch_row_field(row, 3), "0") == 0 &&
			strcmp(dpwin_ch_row_field(row, 1), "T") == 0)
		{
			engine_full = dpwin_ch_row_field(row, 2);
			uuid = dpwin_ch_row_field(row, 4);
			continue;
		}
		same = same && ncolumns < target->ncolumns &&
			strcmp(dpwin_ch_row_field(row, 1), target->column_names[ncolumns]) == 0 &&
			strcmp(dpwin_ch_row_field(row, 2), target->column_types[ncolumns]) == 0;
		ncolumns++;
	}
	if (engine_full == NULL || !same || ncolumns != target->ncolumns ||
		(target->engine_full != NULL && strcmp(engine_full, target->engine_full) != 0))
		clone_changed(target, name);
	return pstrdup(uuid);
}

char *
dpwin_target_check_like(ChClient *client, const DpwinTargetInfo *target,
						const char *name)
{
	List	   *names = list_make1((char *) name);

	/*
	 * The table's row also carries its UUID: the generation's is journaled
	 * with the intent, and reading it here saves a statement after the
	 * build.
	 */
	return copy_check(target, copies_rows(client, target, names), name);
}

void
dpwin_target_check_like_start(ChClient *client, const DpwinTargetInfo *target,
							  const char *name)
{
	dpwin_ch_start(client, copies_sql(target, list_make1((char *) name)), "q");
}

char *
dpwin_target_check_like_finish(ChClient *client, const DpwinTargetInfo *target,
							   const char *name)
{
	return copy_check(target, dpwin_ch_parse_tsv(dpwin_ch_finish(client)), name);
}

void
dpwin_target_check_copies(ChClient *client, const DpwinTargetInfo *target,
						  List *names)
{
	List	   *rows;
	ListCell   *lc;

	if (names == NIL)
		return;
	rows = copies_rows(client, target, names);
	foreach(lc, names)
		copy_check(target, rows, (const char *) lfirst(lc));
}

/*
 * The layout of one table's parts (dpwin_target_parts_layout()): SHA-256 (hex) over each
 * partition's id, rows, lowest and highest block number, and the table's
 * highest block or mutation number.  Within a plain MergeTree table
 * without TTL (what admission admits) a merge changes none of them, and
 * every other change of the rows does: an insert, an attach or a mutation
 * (a lightweight delete or update among them) takes a new number, a
 * dropped or detached part or partition takes rows or a partition away,
 * and a patch part is a partition of its own (docs/design.md, "Skipping
 * unchanged chunks").
 */
typedef struct PartsLayout
{
	StringInfoData text;
	char	   *partition;		/* the partition being summed */
	int64		rows;
	int64		min_block;
	int64		max_block;
	int64		top;			/* highest block or mutation number */
} PartsLayout;

static void
layout_flush(PartsLayout *l)
{
	if (l->partition != NULL)
		appendStringInfo(&l->text, "%s\t" INT64_FORMAT "\t" INT64_FORMAT "\t" INT64_FORMAT "\n",
						 l->partition, l->rows, l->min_block, l->max_block);
	l->partition = NULL;
}

static void
layout_add(PartsLayout *l, const char *partition, int64 rows, int64 min_block,
		   int64 max_block, int64 data_version)
{
	if (l->partition == NULL || strcmp(l->partition, partition) != 0)
	{
		layout_flush(l);
		l->partition = pstrdup(partition);
		l->rows = 0;
		l->min_block = min_block;
		l->max_block = max_block;
	}
	l->rows += rows;
	l->min_block = Min(l->min_block, min_block);
	l->max_block = Max(l->max_block, max_block);
	l->top = Max(l->top, Max(max_block, data_version));
}

char *
dpwin_target_parts_sql(const char *database, List *tables)
{
	return psprintf("SELECT partition_id, rows, hash_of_all_files, `table`,"
					" min_block_number, max_block_number, data_version, level FROM system.parts"
					" WHERE database = %s AND `table` IN %s AND active"
					" ORDER BY partition_id, rows, hash_of_all_files, `table`",
					dpwin_ch_quote_literal(database), dpwin_ch_quote_literal_list(tables));
}

char *
dpwin_target_parts_layout(List *rows, const char *table)
{
	PartsLayout l = {0};
	ListCell   *lc;

	initStringInfo(&l.text);
	appendStringInfoString(&l.text, "dpwin-layout-v1\n");
	foreach(lc, rows)
	{
		List	   *row = (List *) lfirst(lc);

		if (table != NULL && strcmp(dpwin_ch_row_field(row, 3), table) != 0)
			continue;
		layout_add(&l, dpwin_ch_row_field(row, 0),
				   strtoi64(dpwin_ch_row_field(row, 1), NULL, 10),
				   strtoi64(dpwin_ch_row_field(row, 4), NULL, 10),
				   strtoi64(dpwin_ch_row_field(row, 5), NULL, 10),
				   strtoi64(dpwin_ch_row_field(row, 6), NULL, 10));
	}
	layout_flush(&l);
	appendStringInfo(&l.text, INT64_FORMAT "\n", l.top);
	return dpwin_sha256_hex(l.text.data, l.text.len);
}

/*
 * Without SYNC: in an Atomic database the name is free at once and the
 * data goes after database_atomic_delay_before_drop_table_sec; waiting for
 * the data to go would only hold the refresh up.
 */
static char *
drop_tables_sql(const char *database, List *names)
{
	return psprintf("DROP TABLE IF EXISTS %s", dpwin_ch_qualified_name_list(database, names));
}

void
dpwin_target_drop_table(ChClient *client, const char *database,
						const char *name)
{
	dpwin_ch_exec(client, drop_tables_sql(database, list_make1((char *) name)));
}

/*
 * One statement for the whole list: a refresh's clean-up drops every
 * staging table at once instead of one round trip each.  Servers before
 * 24.1 take one table per DROP and reject the list as a syntax error;
 * they get one statement per table, as before.  The clean-up often runs
 * on a connection that sat idle while the target was published, and a
 * DROP ... IF EXISTS may run twice: a lost reply or another transient
 * failure is sent again (docs/design.md, "The conversation with
 * ClickHouse").
 */
void
dpwin_target_drop_tables(ChClient *client, const char *database, List *names)
{
	ListCell   *lc;
	ChHttpReply reply;
	ChHttpStatus status;

	if (names == NIL)
		return;
	status = dpwin_ch_try_idempotent(client, drop_tables_sql(database, names),
									 "drop", &reply);
	if (status == CHHTTP_SERVER_ERROR &&
		reply.exception_code == CH_SYNTAX_ERROR && list_length(names) > 1)
	{
		foreach(lc, names)
			dpwin_target_drop_tables(client, database, list_make1(lfirst(lc)));
	}
	else if (status != CHHTTP_OK)
		dpwin_ch_report(status, &reply, "dropping tables");
}

void
dpwin_target_drop_tables_start(ChClient *client, const char *database,
							   List *names)
{
	dpwin_ch_start(client, drop_tables_sql(database, names), "drop");
}

char *
dpwin_target_table_uuid(ChClient *client, const char *database,
						const char *name)
{
	List	   *rows;

	rows = dpwin_ch_parse_tsv(dpwin_ch_exec(client,
											psprintf("SELECT toString(uuid) FROM system.tables WHERE database = %s AND name = %s",
													 dpwin_ch_quote_literal(database),
													 dpwin_ch_quote_literal(name))));
	if (rows == NIL)
		return NULL;
	if (list_length(rows) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("ClickHouse returned %d rows for the UUID of %s",
						list_length(rows), dpwin_ch_qualified_name(database, name))));
	return pstrdup(dpwin_ch_row_field((List *) linitial(rows), 0));
}

void
dpwin_target_table_uuids(ChClient *client, const char *database,
						 const char *a, const char *b,
						 char **uuid_a, char **uuid_b)
{
	List	   *rows;
	ListCell   *lc;

	*uuid_a = NULL;
	*uuid_b = NULL;
	rows = dpwin_ch_parse_tsv(dpwin_ch_exec(client,
											psprintf("SELECT name, toString(uuid) FROM system.tables WHERE database = %s AND name IN (%s, %s)",
													 dpwin_ch_quote_literal(database),
													 dpwin_ch_quote_literal(a),
													 dpwin_ch_quote_literal(b))));
	foreach(lc, rows)
	{
		List	   *row = (List *) lfirst(lc);

		if (strcmp(dpwin_ch_row_field(row, 0), a) == 0)
			*uuid_a = pstrdup(dpwin_ch_row_field(row, 1));
		else if (strcmp(dpwin_ch_row_field(row, 0), b) == 0)
			*uuid_b = pstrdup(dpwin_ch_row_field(row, 1));
	}
}

ChHttpStatus
dpwin_target_rename(ChClient *client, const char *database,
					const char *from, const char *to, const char *query_id,
					ChHttpReply *reply)
{
	return dpwin_ch_try(client,
						psprintf("RENAME TABLE %s TO %s",
								 dpwin_ch_qualified_name(database, from),
								 dpwin_ch_qualified_name(database, to)),
						query_id, NULL, NULL, reply);
}

static char *
list_tables_sql(const char *database, const char *prefix)
{
	return psprintf("SELECT name FROM system.tables WHERE database = %s AND startsWith(name, %s) ORDER BY name",
					dpwin_ch_quote_literal(database), dpwin_ch_quote_literal(prefix));
}

static List *
listed_names(const char *body)
{
	List	   *names = NIL;
	ListCell   *lc;

	foreach(lc, dpwin_ch_parse_tsv(body))
		names = lappend(names, pstrdup(dpwin_ch_row_field((List *) lfirst(lc), 0)));
	return names;
}

List *
dpwin_target_list_tables(ChClient *client, const char *database,
						 const char *prefix)
{
	ChHttpReply reply;
	ChHttpStatus status;

	/* a lookup: sent again after a transient failure, like the DROP after it */
	status = dpwin_ch_try_idempotent(client, list_tables_sql(database, prefix),
									 "list", &reply);
	if (status != CHHTTP_OK)
		dpwin_ch_report(status, &reply, "listing tables");
	return listed_names(reply.body.data);
}

void
dpwin_target_list_tables_start(ChClient *client, const char *database,
							   const char *prefix)
{
	dpwin_ch_start(client, list_tables_sql(database, prefix), "list");
}

bool
dpwin_target_list_tables_finish(ChClient *client, List **names)
{
	ChHttpReply reply;

	*names = NIL;
	if (dpwin_ch_finish_status(client, &reply) != CHHTTP_OK)
		return false;
	*names = listed_names(reply.body.data);
	return true;
}


/* ----------------------------------------------------------------------
 * Rows: digest, predicates, copy, exchange
 * ----------------------------------------------------------------------
 */

void
dpwin_target_digest(ChClient *client, const DpwinTargetInfo *target,
					const char *table, const char *where_sql,
					const char *settings, const DpwinDigestKey *key,
					DpwinDigest *out)
{
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s FROM %s",
					 dpwin_digest_ch_select_list(key, target->quoted_columns),
					 dpwin_ch_qualified_name(target->database, table));
	if (where_sql != NULL)
		appendStringInfo(&sql, " WHERE %s", where_sql);
	if (settings != NULL)
		appendStringInfo(&sql, " SETTINGS %s", settings);

	digest_answer(dpwin_ch_exec(client, sql.data), target, table, out);
}

void
dpwin_target_digest_like_start(ChClient *client, const DpwinTargetInfo *target,
							   const char *table, const DpwinDigestKey *key,
							   const char *also_sql)
{
	dpwin_ch_start(client,
				   psprintf("SELECT %s%s%s FROM %s",
							dpwin_digest_ch_select_list(key, target->quoted_columns),
							also_sql != NULL ? ", " : "",
							also_sql != NULL ? also_sql : "",
							dpwin_ch_qualified_name(target->database, table)),
				   "digest");
}

List *
dpwin_target_digest_like_finish(ChClient *client, const DpwinTargetInfo *target,
								const char *table, int nalso, DpwinDigest *out)
{
	char	   *answer = dpwin_ch_finish(client);
	List	   *rows = dpwin_ch_parse_tsv(answer);
	List	   *row = list_length(rows) == 1 ? (List *) linitial(rows) : NIL;

	if (list_length(row) != 3 + nalso)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("unexpected answer from ClickHouse to the digest of %s",
						dpwin_ch_qualified_name(target->database, table)),
				 errdetail_internal("Answer: \"%s\".", answer)));
	digest_answer(psprintf("%s\t%s\t%s", dpwin_ch_row_field(row, 0),
						   dpwin_ch_row_field(row, 1), dpwin_ch_row_field(row, 2)),
				  target, table, out);
	return list_truncate(list_copy_tail(row, 3), nalso);
}

/*
 * Parse the answer to a SELECT of dpwin_digest_ch_select_list() over
 * db.table (named in errors); ereports on anything else.
 */
static void
digest_answer(char *answer, const DpwinTargetInfo *target,
			  const char *table, DpwinDigest *out)
{
	char	   *nl = strchr(answer, '\n');

	if (nl != NULL)
	{
		if (nl[1] != '\0')
			ereport(ERROR,
					(errcode(ERRCODE_PROTOCOL_VIOLATION),
					 errmsg("unexpected answer from ClickHouse to the digest of %s",
							dpwin_ch_qualified_name(target->database, table))));
		*nl = '\0';
	}
	if (!dpwin_digest_from_tsv(answer, out))
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("unexpected answer from ClickHouse to the digest of %s",
						dpwin_ch_qualified_name(target->database, table)),
				 errdetail_internal("Answer: \"%s\".", answer)));
}

/* A window bound as an exact DateTime64(6, 'UTC') expression. */
char *
dpwin_target_bound_sql(TimestampTz ts, const char *what)
{
	return psprintf("fromUnixTimestamp64Micro(toInt64(" INT64_FORMAT "), 'UTC')",
					dpwin_unix_usecs(ts, what));
}

char *
dpwin_target_window_predicate(const DpwinTargetInfo *target,
							  const char *window_column,
							  TimestampTz lo, TimestampTz hi)
{
	char	   *w = dpwin_ch_quote_ident(window_column);
	char	   *slo = dpwin_target_bound_sql(lo, "lower");
	char	   *shi = dpwin_target_bound_sql(hi, "upper");

	return psprintf("(%s >= %s AND %s < %s)", w, slo, w, shi);
}

ChHttpStatus
dpwin_target_exchange(ChClient *client, const DpwinTargetInfo *target,
					  const char *generation, const char *query_id,
					  ChHttpReply *reply)
{
	return dpwin_ch_try(client,
						psprintf("EXCHANGE TABLES %s AND %s",
								 dpwin_ch_qualified_name(target->database, target->table),
								 dpwin_ch_qualified_name(target->database, generation)),
						query_id, NULL, NULL, reply);
}

/*
 * Do the chunks (in order) all have the first one's width and follow one
 * another without a gap, the last one possibly shorter?
 */
static bool
chunks_uniform(List *chunks)
{
	DpwinChunkBounds *first = linitial(chunks);
	int64		width = first->hi - first->lo;
	TimestampTz expect = first->lo;
	ListCell   *lc;

	foreach(lc, chunks)
	{
		DpwinChunkBounds *c = lfirst(lc);

		if (c->lo != expect || c->hi <= c->lo || c->hi - c->lo > width ||
			(lnext(chunks, lc) != NULL && c->hi - c->lo != width))
			return false;
		expect = c->hi;
	}
	return true;
}

char *
dpwin_target_chunk_index_sql(const char *window_column, List *chunks)
{
	DpwinChunkBounds *first = linitial(chunks);

	/*
	 * A row's chunk is a division of its microseconds, exact because the
	 * window column is DateTime64(p <= 6) (admission), where searching the
	 * bounds would cost as much as a digest of the row.
	 */
	if (!chunks_uniform(chunks))
		return NULL;
	return psprintf("(intDiv(toUnixTimestamp64Micro(%s) - toInt64(" INT64_FORMAT
					"), toInt64(" INT64_FORMAT ")) + 1)",
					dpwin_ch_quote_ident(window_column),
					dpwin_unix_usecs(first->lo, "lower"), first->hi - first->lo);
}

void
dpwin_target_chunk_digests(ChClient *client, const DpwinTargetInfo *target,
						   const char *table, const char *window_column,
						   List *chunks, const DpwinDigestKey *key,
						   DpwinDigest *out)
{
	StringInfoData sql;
	char	   *w = dpwin_ch_quote_ident(window_column);
	char	   *index = dpwin_target_chunk_index_sql(window_column, chunks);
	DpwinChunkBounds *first = linitial(chunks);
	DpwinChunkBounds *last = llast(chunks);
	char	   *answer;
	char	   *line;
	char	   *save;
	int			nchunks = list_length(chunks);

	/*
	 * One statement, so that every chunk is digested from one generation of
	 * the table.  The chunks are a window's (one width, end to end, the last
	 * one possibly shorter).  The alias is prefixed so that it cannot shadow
	 * a column.
	 */
	if (index == NULL)
		elog(ERROR, "chunk digests need the chunks of one window");
	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s AS __dpwin_chunk, %s FROM %s WHERE %s >= %s AND %s < %s"
					 " GROUP BY __dpwin_chunk ORDER BY __dpwin_chunk"
					 " SETTINGS " DPWIN_TARGET_SCAN_SETTINGS " FORMAT TabSeparated",
					 index, dpwin_digest_ch_select_list(key, target->quoted_columns),
					 dpwin_ch_qualified_name(target->database, table),
					 w, dpwin_target_bound_sql(first->lo, "lower"),
					 w, dpwin_target_bound_sql(last->hi, "upper"));

	for (int i = 0; i < nchunks; i++)
		out[i] = (DpwinDigest) DPWIN_DIGEST_INIT;
	answer = dpwin_ch_exec(client, sql.data);
	for (line = strtok_r(answer, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
	{
		char	   *tab = strchr(line, '\t');
		int			idx = tab ? atoi(line) : 0;

		if (idx < 1 || idx > nchunks)
			ereport(ERROR,
					(errcode(ERRCODE_PROTOCOL_VIOLATION),
					 errmsg("unexpected answer from ClickHouse to the chunk digests of %s",
							dpwin_ch_qualified_name(target->database, table)),
					 errdetail_internal("Line: \"%s\".", line)));
		digest_answer(tab + 1, target, table, &out[idx - 1]);
	}
}
