/*-------------------------------------------------------------------------
 *
 * partition.c
 *	  O(window) publication on partitioned targets: clone the partitions
 *	  that lie wholly outside the window into the generation, copy rows
 *	  only from the others, and verify the clones by their parts.
 *
 *	  What a partition holds is read from the minmax index that every
 *	  MergeTree part keeps for the columns of the partition key.  ClickHouse
 *	  exposes it through the implicit projection _minmax_count_projection:
 *	  `SELECT _part, min(w), max(w), count() ... GROUP BY _part` is answered
 *	  from the parts' metadata, and force_optimize_projection = 1 makes the
 *	  server refuse (rather than scan) when it cannot answer that way.
 *
 *	  Two facts about that index decide the rules below:
 *
 *	  - For a Nullable column the index orders NULL last: a part with some
 *		NULLs has max = NULL and min = the least value; a part with only
 *		NULLs has min = max = NULL.
 *	  - Aggregated over several parts, min() and max() skip NULL, so a
 *		partition-level max can hide a NULL-last part's real maximum (a
 *		part {09-08, 09-10, NULL} next to a part {09-08 12:00} shows
 *		max = 09-08 12:00 for the partition).  So every part is judged on
 *		its own, and a partition is cloned only if all its parts are.
 *
 *	  A part lies outside [lo, hi) when min = max = NULL (only NULL window
 *	  values, all kept), when max is NULL and min >= hi, or when both are
 *	  values and max < lo or min >= hi.  Anything else may hold window rows
 *	  and is copied with the keep predicate.
 *
 *	  A partition that a staged row falls into is copied even when its
 *	  current rows all lie outside the window (a weekly partition when the
 *	  window starts mid-week): otherwise its clone and the staged rows would
 *	  share it and could only be told apart by reading.  The staged chunks
 *	  themselves reach the generation by the same cloning, from their
 *	  staging tables (CREATE TABLE AS copies of the target); without
 *	  cloning (unpartitioned target, ...) they are copied as before.
 *
 *	  Cloned partitions are never read.  They are verified by comparing
 *	  the generation's parts with the target's in system.parts: ATTACH
 *	  PARTITION FROM hard-links the parts and renumbers their blocks, so
 *	  the part names differ, but partition, rows and hash_of_all_files (a
 *	  checksum of every file of the part) are equal.  A background merge on
 *	  either side changes the parts but not the rows; such a partition is
 *	  compared by digest instead, so merges cost time, never correctness.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "common/int.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/timestamp.h"

#include "chclient.h"
#include "partition.h"

/* Partitions attached per ALTER TABLE statement. */
#define ATTACH_BATCH		100

/* ClickHouse exception codes we react to. */
#define CH_UNKNOWN_SETTING	115
#define CH_PROJECTION_NOT_USED	584

/* One partition as its parts' minmax indexes describe it. */
typedef struct PartitionMeta
{
	char	   *id;
	int64		parts;
	int64		rows;
	bool		outside;		/* every part lies outside the window */
} PartitionMeta;

static bool
string_in_list(const char *s, List *list)
{
	ListCell   *lc;

	foreach(lc, list)
		if (strcmp(s, (const char *) lfirst(lc)) == 0)
			return true;
	return false;
}

/* "('a', 'b', ...)" of a non-empty list of strings. */
static char *
literal_list(List *items)
{
	StringInfoData buf;
	ListCell   *lc;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '(');
	foreach(lc, items)
	{
		if (foreach_current_index(lc) > 0)
			appendStringInfoString(&buf, ", ");
		appendStringInfoString(&buf, ch_quote_literal((const char *) lfirst(lc)));
	}
	appendStringInfoChar(&buf, ')');
	return buf.data;
}

/*
 * Queries that select partitions by _partition_id run with
 * optimize_move_to_prewhere = 0.  With the automatic move to PREWHERE the
 * server weighs every part of the table (about a millisecond each) before
 * the partition condition drops the parts it excludes: 0.45 s on a
 * 300-partition target for a query that reads nothing, 5 ms without.  The
 * setting exists in every server version dpwin admits.
 */
#define PARTITION_QUERY_SETTINGS "optimize_move_to_prewhere = 0"

/*
 * Digest of db.table: rows of the partitions selected by part_sql (a
 * condition on _partition_id), further restricted by where_sql; either may
 * be NULL.
 */
static void
digest_where(ChClient *client, const DpwinTargetInfo *target, const char *table,
			 const char *part_sql, const char *where_sql,
			 const DpwinDigestKey *key, DpwinDigest *out)
{
	StringInfoData sql;

	if (part_sql == NULL)
	{
		dpwin_target_digest(client, target, table, where_sql, key, out);
		return;
	}
	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s FROM %s WHERE %s",
					 dpwin_digest_ch_select_list(key, target->quoted_columns),
					 ch_qualified_name(target->database, table), part_sql);
	if (where_sql != NULL)
		appendStringInfo(&sql, " AND %s", where_sql);
	appendStringInfoString(&sql, " SETTINGS " PARTITION_QUERY_SETTINGS);
	dpwin_target_digest_answer(ch_exec(client, sql.data), target, table, out);
}

/*
 * INSERT INTO db.dest SELECT the target's columns FROM db.src WHERE
 * part_sql AND where_sql, like dpwin_target_copy_rows() (which it calls
 * when part_sql is NULL).
 */
static void
copy_where(ChClient *client, const DpwinTargetInfo *target, const char *dest,
		   const char *src, const char *part_sql, const char *where_sql)
{
	StringInfoData sql;
	char	   *query_id;
	ChHttpReply reply;
	ChHttpStatus status;

	if (part_sql == NULL)
	{
		dpwin_target_copy_rows(client, target, dest, src, where_sql);
		return;
	}
	query_id = ch_next_query_id(client, "copy");
	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s (%s) SELECT %s FROM %s WHERE %s",
					 ch_qualified_name(target->database, dest),
					 target->quoted_columns, target->quoted_columns,
					 ch_qualified_name(target->database, src), part_sql);
	if (where_sql != NULL)
		appendStringInfo(&sql, " AND %s", where_sql);
	/* duplicates are rows too (see dpwin_target_copy_rows) */
	appendStringInfoString(&sql, " SETTINGS insert_deduplicate = 0, " PARTITION_QUERY_SETTINGS);

	status = ch_try(client, sql.data, query_id, NULL, NULL, &reply);
	if (status != CHHTTP_OK)
	{
		if (ch_status_outcome_unknown(status))
			ch_settle_query(client, query_id);
		ch_report(status, &reply,
				  psprintf("copying rows from %s into %s",
						   ch_qualified_name(target->database, src),
						   ch_qualified_name(target->database, dest)));
	}
}

/*
 * The partitions of db.table from the minmax indexes of their parts, or
 * NIL with *why_not set when the server cannot answer from metadata.
 */
static List *
read_partitions(ChClient *client, const char *database, const char *table,
				const char *window_column, TimestampTz lo, TimestampTz hi,
				char **why_not)
{
	char	   *w = ch_quote_ident(window_column);
	char	   *slo = dpwin_target_bound_sql(lo, "lower");
	char	   *shi = dpwin_target_bound_sql(hi, "upper");
	char	   *query;
	List	   *rows;
	List	   *result = NIL;
	ListCell   *lc;
	ChHttpReply reply;
	ChHttpStatus status;
	bool		implicit_setting = true;

	/*
	 * Aliases are prefixed so that they cannot shadow a target column.
	 * ifNull(..., 0): a comparison with NULL decides nothing, so copy.
	 */
	for (;;)
	{
		query = psprintf("SELECT __dpwin_p, count(), sum(__dpwin_n), min(__dpwin_ok) FROM ("
						 "SELECT _partition_id AS __dpwin_p, _part AS __dpwin_part, count() AS __dpwin_n, "
						 "min(%s) AS __dpwin_min, max(%s) AS __dpwin_max, "
						 "toUInt8(ifNull(if(isNull(__dpwin_min), 1, "
						 "if(isNull(__dpwin_max), __dpwin_min >= %s, "
						 "__dpwin_max < %s OR __dpwin_min >= %s)), 0)) AS __dpwin_ok "
						 "FROM %s GROUP BY __dpwin_p, __dpwin_part) "
						 "GROUP BY __dpwin_p ORDER BY __dpwin_p "
						 "SETTINGS force_optimize_projection = 1%s "
						 "FORMAT TabSeparated",
						 w, w, shi, slo, shi,
						 ch_qualified_name(database, table),
						 implicit_setting ? ", optimize_use_implicit_projections = 1" : "");
		status = ch_try(client, query, ch_next_query_id(client, "parts"),
						NULL, NULL, &reply);
		if (status == CHHTTP_SERVER_ERROR &&
			reply.exception_code == CH_UNKNOWN_SETTING && implicit_setting)
		{
			/* A server older than that setting uses the projection anyway. */
			implicit_setting = false;
			continue;
		}
		break;
	}
	if (status == CHHTTP_SERVER_ERROR &&
		reply.exception_code == CH_PROJECTION_NOT_USED)
	{
		*why_not = psprintf("the server cannot read the minmax index of %s (_minmax_count_projection not used)",
							ch_qualified_name(database, table));
		return NIL;
	}
	if (status != CHHTTP_OK)
		ch_report(status, &reply,
				  psprintf("reading the partitions of %s", ch_qualified_name(database, table)));

	rows = ch_parse_tsv(reply.body.data);
	foreach(lc, rows)
	{
		List	   *row = (List *) lfirst(lc);
		PartitionMeta *p = palloc0(sizeof(PartitionMeta));

		if (list_length(row) != 4)
			ereport(ERROR,
					(errcode(ERRCODE_PROTOCOL_VIOLATION),
					 errmsg("unexpected answer from ClickHouse about the partitions of %s",
							ch_qualified_name(database, table))));
		p->id = pstrdup(ch_row_field(row, 0));
		p->parts = pg_strtoint64(ch_row_field(row, 1));
		p->rows = pg_strtoint64(ch_row_field(row, 2));
		p->outside = strcmp(ch_row_field(row, 3), "1") == 0;
		result = lappend(result, p);
	}
	return result;
}

/* Is the window column one of the columns of the target's partition key? */
static bool
window_in_partition_key(ChClient *client, const DpwinTargetInfo *target,
						const char *window_column)
{
	char	   *answer;

	answer = ch_scalar(client,
					   psprintf("SELECT count() FROM system.columns WHERE database = %s AND `table` = %s "
								"AND name = %s AND is_in_partition_key",
								ch_quote_literal(target->database),
								ch_quote_literal(target->table),
								ch_quote_literal(window_column)));
	return answer != NULL && strcmp(answer, "1") == 0;
}

DpwinPartitionPlan *
dpwin_partition_plan(ChClient *client, const DpwinTargetInfo *target,
					 const char *window_column, TimestampTz lo, TimestampTz hi,
					 List *staging_tables)
{
	DpwinPartitionPlan *plan = palloc0(sizeof(DpwinPartitionPlan));
	List	   *partitions;
	List	   *staged = NIL;
	ListCell   *lc;

	if (target->partition_key == NULL || target->partition_key[0] == '\0')
	{
		plan->why_not = "the target is not partitioned";
		return plan;
	}
	if (!window_in_partition_key(client, target, window_column))
	{
		plan->why_not = psprintf("the partition key %s does not use the window column",
								 target->partition_key);
		return plan;
	}
	partitions = read_partitions(client, target->database, target->table,
								 window_column, lo, hi, &plan->why_not);
	if (plan->why_not != NULL)
	{
		ereport(LOG,
				(errmsg("dpwin: copying every kept row of %s: %s",
						ch_qualified_name(target->database, target->table),
						plan->why_not)));
		return plan;
	}

	/*
	 * Partitions that staged rows will go to: a row of the window can fall
	 * into a partition whose current rows all lie outside it (a weekly
	 * partition of a window starting mid-week).  Such a partition must be
	 * copied, or the clone and the staged rows would have to be told apart
	 * by scanning.
	 */
	if (staging_tables != NIL)
	{
		List	   *rows;

		rows = ch_parse_tsv(ch_exec(client,
									psprintf("SELECT DISTINCT partition_id FROM system.parts "
											 "WHERE database = %s AND `table` IN %s AND active ORDER BY partition_id",
											 ch_quote_literal(target->database),
											 literal_list(staging_tables))));
		foreach(lc, rows)
			staged = lappend(staged, pstrdup(ch_row_field((List *) lfirst(lc), 0)));
	}

	plan->cloning = true;
	plan->target_partitions = list_length(partitions);
	plan->staged_partitions = list_length(staged);
	foreach(lc, partitions)
	{
		PartitionMeta *p = (PartitionMeta *) lfirst(lc);

		if (p->outside && !string_in_list(p->id, staged))
		{
			plan->cloned = lappend(plan->cloned, p->id);
			plan->cloned_parts += p->parts;
			plan->cloned_rows += p->rows;
		}
		else
			plan->copied = lappend(plan->copied, p->id);
	}
	if (plan->cloned != NIL)
		plan->not_cloned_sql = psprintf("_partition_id NOT IN %s",
										literal_list(plan->cloned));
	return plan;
}

/*
 * ALTER TABLE gen ATTACH PARTITION ID ids[i] FROM sources[i], a batch of
 * partitions per statement (one statement per partition would cost a
 * round trip each: 300 of them take seconds, one batch milliseconds).
 */
static void
attach_partitions(ChClient *client, const DpwinTargetInfo *target,
				  List *ids, List *sources, const char *generation)
{
	char	   *qgen = ch_qualified_name(target->database, generation);
	ListCell   *lc;
	ListCell   *ls;
	StringInfoData sql;
	int			n = 0;

	initStringInfo(&sql);
	forboth(lc, ids, ls, sources)
	{
		appendStringInfo(&sql, "%s ATTACH PARTITION ID %s FROM %s",
						 n == 0 ? psprintf("ALTER TABLE %s", qgen) : ",",
						 ch_quote_literal((const char *) lfirst(lc)),
						 ch_qualified_name(target->database, (const char *) lfirst(ls)));
		n++;
		if (n == ATTACH_BATCH || lnext(ids, lc) == NULL)
		{
			char	   *query_id = ch_next_query_id(client, "attach");
			ChHttpReply reply;
			ChHttpStatus status;

			status = ch_try(client, sql.data, query_id, NULL, NULL, &reply);
			if (status != CHHTTP_OK)
			{
				/* It may still be running; the generation is dropped next. */
				if (ch_status_outcome_unknown(status))
					ch_settle_query(client, query_id);
				ch_report(status, &reply,
						  psprintf("cloning partitions into %s", qgen));
			}
			resetStringInfo(&sql);
			n = 0;
		}
	}
}

void
dpwin_partition_fill_keep(ChClient *client, const DpwinTargetInfo *target,
						  DpwinPartitionPlan *plan, const char *generation,
						  const char *keep_sql)
{
	if (plan->cloned != NIL)
	{
		List	   *sources = NIL;

		for (int i = 0; i < list_length(plan->cloned); i++)
			sources = lappend(sources, target->table);
		attach_partitions(client, target, plan->cloned, sources, generation);
	}

	/*
	 * Every partition that is not cloned, including any that appeared
	 * since planning: the keep digests compare the same set.
	 */
	copy_where(client, target, generation, target->table, plan->not_cloned_sql,
			   keep_sql);
}

void
dpwin_partition_fill_staged(ChClient *client, const DpwinTargetInfo *target,
							const DpwinPartitionPlan *plan,
							const char *generation, List *staging_tables)
{
	List	   *rows;
	List	   *ids = NIL;
	List	   *sources = NIL;
	ListCell   *lc;

	if (plan == NULL || !plan->cloning)
	{
		foreach(lc, staging_tables)
			dpwin_target_copy_rows(client, target, generation,
								   (const char *) lfirst(lc), NULL);
		return;
	}
	if (staging_tables == NIL)
		return;
	rows = ch_parse_tsv(ch_exec(client,
								psprintf("SELECT DISTINCT `table`, partition_id FROM system.parts "
										 "WHERE database = %s AND `table` IN %s AND active "
										 "ORDER BY `table`, partition_id",
										 ch_quote_literal(target->database),
										 literal_list(staging_tables))));
	foreach(lc, rows)
	{
		List	   *row = (List *) lfirst(lc);

		sources = lappend(sources, pstrdup(ch_row_field(row, 0)));
		ids = lappend(ids, pstrdup(ch_row_field(row, 1)));
	}
	if (ids != NIL)
		attach_partitions(client, target, ids, sources, generation);
}

void
dpwin_partition_digest(ChClient *client, const DpwinTargetInfo *target,
					   const DpwinPartitionPlan *plan, const char *table,
					   const char *where_sql, const DpwinDigestKey *key,
					   DpwinDigest *out)
{
	digest_where(client, target, table, plan ? plan->not_cloned_sql : NULL,
				 where_sql, key, out);
}

void
dpwin_partition_verify_cloned(ChClient *client, const DpwinTargetInfo *target,
							  DpwinPartitionPlan *plan, const char *generation,
							  const char *window_column,
							  TimestampTz lo, TimestampTz hi,
							  const char *keep_sql, const DpwinDigestKey *key,
							  const char *when)
{
	char	   *cloned_list;
	char	   *ldb = ch_quote_literal(target->database);
	List	   *rows;
	List	   *differ = NIL;
	List	   *gen_partitions;
	char	   *why_not = NULL;
	ListCell   *lc;
	int64		cloned_rows = 0;

	if (plan == NULL || plan->cloned == NIL)
		return;
	cloned_list = literal_list(plan->cloned);

	/*
	 * The multisets of (partition, rows, checksum) of the cloned
	 * partitions' active parts, target against generation: the partitions
	 * where they differ.
	 */
	rows = ch_parse_tsv(ch_exec(client,
								psprintf("SELECT DISTINCT partition_id FROM ("
										 "SELECT partition_id, rows, hash_of_all_files, toInt64(1) AS m FROM system.parts "
										 "WHERE database = %s AND `table` = %s AND active AND partition_id IN %s "
										 "UNION ALL "
										 "SELECT partition_id, rows, hash_of_all_files, toInt64(-1) AS m FROM system.parts "
										 "WHERE database = %s AND `table` = %s AND active AND partition_id IN %s) "
										 "GROUP BY partition_id, rows, hash_of_all_files HAVING sum(m) != 0 "
										 "ORDER BY partition_id",
										 ldb, ch_quote_literal(target->table), cloned_list,
										 ldb, ch_quote_literal(generation), cloned_list)));
	foreach(lc, rows)
		differ = lappend(differ, pstrdup(ch_row_field((List *) lfirst(lc), 0)));

	/* Same rows in other parts (a merge), or a change of the target? */
	if (differ != NIL)
	{
		char	   *in = psprintf("_partition_id IN %s", literal_list(differ));
		DpwinDigest t;
		DpwinDigest g;

		digest_where(client, target, target->table, in, keep_sql, key, &t);
		digest_where(client, target, generation, in, keep_sql, key, &g);
		if (!dpwin_digest_equal(&t, &g))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("target %s changed outside the window %s",
							ch_qualified_name(target->database, target->table), when),
					 errdetail("Rows kept in partitions %s were %s when cloned and are now %s.",
							   literal_list(differ),
							   dpwin_digest_to_text(&g), dpwin_digest_to_text(&t)),
					 errhint("Hold dpwin.lock_target() in other writers of the target.")));
		plan->digest_checked += list_length(differ);
	}

	/*
	 * A cloned partition must not hold a window row, whatever reached the
	 * target between planning and cloning: the generation's own minmax
	 * indexes say so.
	 */
	gen_partitions = read_partitions(client, target->database, generation,
									 window_column, lo, hi, &why_not);
	if (why_not != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("generation %s cannot be verified", generation),
				 errdetail("%s", why_not)));
	foreach(lc, gen_partitions)
	{
		PartitionMeta *p = (PartitionMeta *) lfirst(lc);

		if (!string_in_list(p->id, plan->cloned))
			continue;
		if (!p->outside)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("target %s changed inside the window %s",
							ch_qualified_name(target->database, target->table), when),
					 errdetail("Cloned partition %s of generation %s may now hold rows of the window.",
							   p->id, generation),
					 errhint("Hold dpwin.lock_target() in other writers of the target.")));
		cloned_rows += p->rows;
	}
	plan->cloned_rows = cloned_rows;
}

char *
dpwin_partition_plan_json(const DpwinPartitionPlan *plan)
{
	StringInfoData buf;

	if (plan == NULL)
		return pstrdup("null");
	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"cloning\": %s", plan->cloning ? "true" : "false");
	if (plan->why_not)
	{
		appendStringInfoString(&buf, ", \"why_not\": ");
		escape_json(&buf, plan->why_not);
	}
	appendStringInfo(&buf, ", \"target_partitions\": %d, \"staged_partitions\": %d"
					 ", \"cloned_partitions\": %d, \"copied_partitions\": %d"
					 ", \"cloned_parts\": " INT64_FORMAT ", \"cloned_rows\": " INT64_FORMAT
					 ", \"digest_checked_partitions\": %d}",
					 plan->target_partitions, plan->staged_partitions,
					 list_length(plan->cloned), list_length(plan->copied),
					 plan->cloned_parts, plan->cloned_rows, plan->digest_checked);
	return buf.data;
}
