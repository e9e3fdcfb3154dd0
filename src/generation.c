/*-------------------------------------------------------------------------
 *
 * generation.c
 *	  Building the replacement generation of a target by cloning, whatever
 *	  the target's partitioning (docs/design.md, "Building the
 *	  generation"):
 *
 *	  1. clone: ATTACH PARTITION ID ... FROM target hard-links every part
 *		 of every partition that may hold a row outside the replaced
 *		 ranges (an unpartitioned table is the one partition 'all');
 *	  2. remove: one DELETE of the rows inside the ranges (a mutation that
 *		 rewrites the cut partitions where they are a small part of the
 *		 target, else a lightweight DELETE);
 *	  3. attach: the verified staging tables' parts, hard-linked too.
 *
 *	  No kept row travels through a SELECT, and none is read to verify:
 *
 *	  - ATTACH PARTITION FROM renumbers a part's blocks but keeps its files,
 *		so partition, rows and hash_of_all_files (a checksum of every file)
 *		of the cloned parts equal the target's: the clone is the target,
 *		file for file, when the two multisets of parts are equal;
 *	  - every row of the generation comes from the clone or from a staged
 *		part, and staged rows all lie inside the ranges, so equal counts of
 *		rows outside the ranges in target and generation (counted on the
 *		window column alone) prove that the DELETE removed no kept row;
 *	  - the staged parts are found in the generation file for file, and the
 *		rows inside the ranges number exactly the staged rows: nothing of
 *		the clone survived inside the ranges.
 *
 *	  A background merge changes parts without changing rows.  Where the
 *	  target's parts no longer match those recorded at the clone, and are
 *	  not exactly their merges, the rows concerned are compared by digest
 *	  instead, so a merge costs time, never correctness.
 *
 *	  Which partitions lie wholly inside the ranges is read from the
 *	  minmax index that every MergeTree part keeps for the columns of the
 *	  partition key, through ClickHouse's implicit _minmax_count_projection
 *	  (force_optimize_projection = 1 makes the server refuse rather than
 *	  scan).  For a Nullable column the index orders NULL last: a part with
 *	  some NULLs has max = NULL.  A part lies inside when its min and max
 *	  are values inside one range; such partitions are not cloned at all.
 *	  Without a usable index every partition is cloned and the DELETE does
 *	  the rest.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "common/int.h"
#include "lib/stringinfo.h"
#include "nodes/value.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/timestamp.h"

#include "generation.h"
#include "window.h"

/*
 * The most text of one ALTER TABLE statement's clauses: the server parses
 * at most max_query_size bytes of a statement (256 KiB by default), and a
 * thousand partitions' clauses take about 100 kB.
 */
#define ALTER_BATCH_BYTES	(200 * 1024)

/*
 * The cut partitions are rewritten when they hold at most 1/REWRITE_SHARE
 * of the target's rows.  Rewriting a row (every column read and written)
 * costs about seven times reading its window value, which is what the next
 * refresh's judgement of the partitions costs per row of the target while
 * lightweight-deleted rows are left (docs/design.md, "Building the
 * generation"); a quarter leaves room for masks that outlive one refresh.
 */
#define REWRITE_SHARE		4

typedef enum PartClass
{
	PART_OUTSIDE,				/* no row inside the ranges */
	PART_INSIDE,				/* every row inside one range */
	PART_MIXED					/* anything else, or unknown */
} PartClass;

/* One partition of the target, judged by its parts' minmax indexes. */
typedef struct PartitionMeta
{
	char	   *id;
	int64		parts;
	int64		rows;
	PartClass	class;
} PartitionMeta;

/*
 * One active part of the target as system.parts shows it, to tell a merge
 * of the parts recorded at the clone from a change (merged_only()).
 */
typedef struct PartLine
{
	const char *partition;
	const char *hash;
	int64		rows;
	int64		min_block;
	int64		max_block;
	int64		level;
	int64		mutation;		/* 0 for a part no mutation has rewritten */
	bool		covered;		/* merged into a part of now (merged_only()) */
} PartLine;

static bool id_member(List *ids, const char *id);

/*
 * The rows inside the ranges as a filter: NULL where the window value is
 * NULL, which a filter drops as it drops 0.  The server prunes with it
 * every part whose minmax index of the column lies outside the ranges
 * without opening it; wrapped in a function (window_ranges_sql()) it reads
 * the column of every part, which for a freshly cloned thousand parts
 * costs half a second (docs/design.md, "Building the generation").
 */
static char *
ranges_filter_sql(const char *window_column, List *ranges)
{
	StringInfoData buf;
	char	   *w = dpwin_ch_quote_ident(window_column);
	ListCell   *lc;

	initStringInfo(&buf);
	if (ranges == NIL)
		appendStringInfoString(&buf, "0");
	foreach(lc, ranges)
	{
		DpwinChunkBounds *r = lfirst(lc);

		appendStringInfo(&buf, "%s(%s >= %s AND %s < %s)",
						 foreach_current_index(lc) > 0 ? " OR " : "",
						 w, dpwin_target_bound_sql(r->lo, "lower"),
						 w, dpwin_target_bound_sql(r->hi, "upper"));
	}
	return buf.data;
}

/* The rows inside the ranges as 1, every other row (NULL included) as 0. */
static char *
window_ranges_sql(const char *window_column, List *ranges)
{
	return psprintf("toUInt8(ifNull(%s, 0))", ranges_filter_sql(window_column, ranges));
}

/* A minmax bound read as Unix microseconds ("" for NULL). */
static bool
read_bound(const char *field, TimestampTz *ts)
{
	if (field[0] == '\0')
		return false;
	*ts = pg_strtoint64(field) - DPWIN_UNIX_TO_PG_USECS;
	return true;
}

static PartClass
classify_part(List *ranges, bool has_min, TimestampTz min,
			  bool has_max, TimestampTz max)
{
	ListCell   *lc;
	bool		touches = false;

	/* only NULL window values: kept */
	if (!has_min && !has_max)
		return PART_OUTSIDE;
	foreach(lc, ranges)
	{
		DpwinChunkBounds *r = lfirst(lc);

		if (has_max && min >= r->lo && max < r->hi)
			return PART_INSIDE;
		/* max NULL: some NULLs, values from min up to anything */
		if (r->hi > min && (!has_max || max >= r->lo))
			touches = true;
	}
	return touches ? PART_MIXED : PART_OUTSIDE;
}

/* The statement of classify_partitions(), as its attempt needs it. */
static char *
classify_sql(const DpwinTargetInfo *target, const char *window_column,
			 bool force, bool implicit_setting)
{
	char	   *w = dpwin_ch_quote_ident(window_column);

	/* Aliases are prefixed so that they cannot shadow a target column. */
	return psprintf("SELECT __dpwin_p, __dpwin_n, toUnixTimestamp64Micro(__dpwin_min),"
					" toUnixTimestamp64Micro(__dpwin_max) FROM ("
					"SELECT _partition_id AS __dpwin_p, _part AS __dpwin_part, count() AS __dpwin_n, "
					"min(%s) AS __dpwin_min, max(%s) AS __dpwin_max "
					"FROM %s GROUP BY __dpwin_p, __dpwin_part) "
					"ORDER BY __dpwin_p "
					"SETTINGS force_optimize_projection = %d%s "
					"FORMAT TabSeparated",
					w, w, dpwin_ch_qualified_name(target->database, target->table),
					force ? 1 : 0,
					implicit_setting ? ", optimize_use_implicit_projections = 1" : "");
}

/* classify_partitions()'s first statement, started on aside, which takes it. */
static void
classify_start(ChClient *aside, const DpwinTargetInfo *target,
			   const char *window_column)
{
	dpwin_ch_start(aside, classify_sql(target, window_column, true, true), "parts");
}

/*
 * The partitions of db.table judged from the minimum and maximum window
 * value of each part's rows (rows a lightweight DELETE removed do not
 * count); *why_not says why the window column had to be read, when it had.
 * Unless may_scan, the column is not read then: NIL is returned, with
 * *why_not set.
 *
 * With started (not NULL), the first statement was started on it by
 * classify_start(): its answer is taken there, and any retry runs on
 * client.
 */
static List *
classify_partitions(ChClient *client, ChClient *started,
					const DpwinTargetInfo *target,
					const char *window_column, List *ranges, bool may_scan,
					char **why_not)
{
	List	   *rows;
	List	   *result = NIL;
	PartitionMeta *cur = NULL;
	ListCell   *lc;
	ChHttpReply reply;
	ChHttpStatus status;
	bool		implicit_setting = true;
	bool		force = true;

	/*
	 * From the parts' minmax indexes (the implicit _minmax_count_projection)
	 * where the server can answer from them for every part; else, with
	 * *why_not set, by reading the window column, which is exact as well.
	 */
	for (;;)
	{
		if (started != NULL)
		{
			status = dpwin_ch_finish_status(started, &reply);
			started = NULL;
		}
		else
			status = dpwin_ch_try(client, classify_sql(target, window_column, force,
													   implicit_setting),
								  dpwin_ch_next_query_id(client, "parts"),
								  NULL, NULL, &reply);
		if (status == CHHTTP_SERVER_ERROR &&
			reply.exception_code == CH_UNKNOWN_SETTING && implicit_setting)
		{
			/* A server older than that setting uses the projection anyway. */
			implicit_setting = false;
			continue;
		}
		if (status == CHHTTP_SERVER_ERROR &&
			reply.exception_code == CH_PROJECTION_NOT_USED && force)
		{
			/*
			 * Parts with lightweight-deleted rows (every refresh whose window
			 * bound falls inside a partition publishes some), or a partition
			 * key without the window column.
			 */
			*why_not = psprintf("the server cannot read the minmax index of %s (_minmax_count_projection not used)",
								dpwin_ch_qualified_name(target->database, target->table));
			if (!may_scan)
				return NIL;
			force = false;
			continue;
		}
		break;
	}
	if (status != CHHTTP_OK)
		dpwin_ch_report(status, &reply,
						psprintf("reading the partitions of %s",
								 dpwin_ch_qualified_name(target->database, target->table)));

	rows = dpwin_ch_parse_tsv(reply.body.data);
	foreach(lc, rows)
	{
		List	   *row = (List *) lfirst(lc);
		TimestampTz min = 0;
		TimestampTz max = 0;
		bool		has_min;
		bool		has_max;
		PartClass	class;

		if (list_length(row) != 4)
			ereport(ERROR,
					(errcode(ERRCODE_PROTOCOL_VIOLATION),
					 errmsg("unexpected answer from ClickHouse about the partitions of %s",
							dpwin_ch_qualified_name(target->database, target->table))));
		has_min = read_bound(dpwin_ch_row_field(row, 2), &min);
		has_max = read_bound(dpwin_ch_row_field(row, 3), &max);
		class = classify_part(ranges, has_min, min, has_max, max);
		if (cur == NULL || strcmp(cur->id, dpwin_ch_row_field(row, 0)) != 0)
		{
			cur = palloc0(sizeof(PartitionMeta));
			cur->id = pstrdup(dpwin_ch_row_field(row, 0));
			cur->class = class;
			result = lappend(result, cur);
		}
		else if (cur->class != class)
			cur->class = PART_MIXED;
		cur->parts++;
		cur->rows += pg_strtoint64(dpwin_ch_row_field(row, 1));
	}
	return result;
}

/*
 * Every partition of the target, unjudged: each may hold anything.  For an
 * unpartitioned target, whose one partition a window of any width touches
 * unless the table is empty or wholly outside it: judging it would read the
 * window column of every row for nothing.
 */
static List *
all_partitions(ChClient *client, const DpwinTargetInfo *target)
{
	List	   *rows;
	List	   *result = NIL;
	ListCell   *lc;

	rows = dpwin_ch_parse_tsv(dpwin_ch_exec(client,
											psprintf("SELECT partition_id, count(), sum(rows) FROM system.parts"
													 " WHERE database = %s AND `table` = %s AND active"
													 " GROUP BY partition_id ORDER BY partition_id",
													 dpwin_ch_quote_literal(target->database),
													 dpwin_ch_quote_literal(target->table))));
	foreach(lc, rows)
	{
		List	   *row = (List *) lfirst(lc);
		PartitionMeta *p = palloc0(sizeof(PartitionMeta));

		p->id = pstrdup(dpwin_ch_row_field(row, 0));
		p->parts = pg_strtoint64(dpwin_ch_row_field(row, 1));
		p->rows = pg_strtoint64(dpwin_ch_row_field(row, 2));
		p->class = PART_MIXED;
		result = lappend(result, p);
	}
	return result;
}

/*
 * Raise the failure of a statement that changes tables, once it is known
 * not to run any more: a lost reply leaves it possibly still running on
 * the server, so it is settled there first.
 */
pg_noreturn static void
report_settled(ChClient *client, ChHttpStatus status, const ChHttpReply *reply,
			   const char *query_id, const char *what)
{
	if (dpwin_ch_status_outcome_unknown(status))
		dpwin_ch_settle_query(client, query_id);
	dpwin_ch_report(status, reply, what);
}

/*
 * ALTER TABLE db.table with each of `clauses`, as many per statement as
 * the server parses (one statement per partition would cost a round trip
 * each: 300 of them take seconds, one batch milliseconds; and each
 * statement costs the server some 20 ms of its own, so that a thousand
 * partitions attach a fifth faster in one statement than in ten).
 */
static void
alter_in_batches(ChClient *client, const char *database, const char *table,
				 List *clauses, const char *what)
{
	char	   *qtable = dpwin_ch_qualified_name(database, table);
	ListCell   *lc;
	StringInfoData sql;
	int			n = 0;

	initStringInfo(&sql);
	foreach(lc, clauses)
	{
		ListCell   *next = lnext(clauses, lc);

		appendStringInfo(&sql, "%s %s",
						 n == 0 ? psprintf("ALTER TABLE %s", qtable) : ",",
						 (const char *) lfirst(lc));
		n++;
		if (next == NULL ||
			sql.len + strlen((const char *) lfirst(next)) + 2 > ALTER_BATCH_BYTES)
		{
			char	   *query_id = dpwin_ch_next_query_id(client, "alter");
			ChHttpReply reply;
			ChHttpStatus status;

			status = dpwin_ch_try(client, sql.data, query_id, NULL, NULL, &reply);
			/* On failure the generation is dropped next. */
			if (status != CHHTTP_OK)
				report_settled(client, status, &reply, query_id,
							   psprintf("%s %s", what, qtable));
			resetStringInfo(&sql);
			n = 0;
		}
	}
}

/* ALTER TABLE gen ATTACH PARTITION ID ids[i] FROM sources[i], in batches. */
static void
attach_partitions(ChClient *client, const char *database, List *ids,
				  List *sources, const char *generation)
{
	List	   *clauses = NIL;
	ListCell   *lc;
	ListCell   *ls;

	forboth(lc, ids, ls, sources)
		clauses = lappend(clauses,
						  psprintf("ATTACH PARTITION ID %s FROM %s",
								   dpwin_ch_quote_literal((const char *) lfirst(lc)),
								   dpwin_ch_qualified_name(database, (const char *) lfirst(ls))));
	alter_in_batches(client, database, generation, clauses, "attaching partitions to");
}

static int64
field_int64(List *row, int n)
{
	return strtoi64(dpwin_ch_row_field(row, n), NULL, 10);
}

static List *
parts_rows(ChClient *client, const char *database, List *tables)
{
	return dpwin_ch_parse_tsv(dpwin_ch_exec(client, dpwin_target_parts_sql(database, tables)));
}

/* A part as parts_differ() compares it: "partition\trows\thash". */
static char *
part_entry(const char *partition, int64 rows, const char *hash)
{
	return psprintf("%s\t" INT64_FORMAT "\t%s", partition, rows, hash);
}

/* The order of the "partition\trows\thash" strings, which parts_differ() walks. */
static int
part_cmp(const ListCell *a, const ListCell *b)
{
	return strcmp((const char *) lfirst(a), (const char *) lfirst(b));
}

/*
 * The parts of parts_rows() (of `table` alone, unless NULL) as sorted
 * "partition\trows\thash" strings.  With sources and ids, also each
 * (table, partition) that has parts, once.  With layout, of one table,
 * also its layout fingerprint.
 */
static List *
parts_of_rows(List *rows, const char *table, List **sources, List **ids,
			  char **layout)
{
	List	   *result = NIL;
	List	   *pairs = NIL;
	ListCell   *lc;

	if (layout != NULL)
		*layout = dpwin_target_parts_layout(rows, table);
	foreach(lc, rows)
	{
		List	   *row = (List *) lfirst(lc);
		char	   *pair;

		if (table != NULL && strcmp(dpwin_ch_row_field(row, 3), table) != 0)
			continue;
		result = lappend(result, part_entry(dpwin_ch_row_field(row, 0), field_int64(row, 1),
											dpwin_ch_row_field(row, 2)));
		if (sources == NULL)
			continue;
		pair = psprintf("%s\t%s", dpwin_ch_row_field(row, 3), dpwin_ch_row_field(row, 0));
		if (!id_member(pairs, pair))
		{
			pairs = lappend(pairs, pair);
			*sources = lappend(*sources, pstrdup(dpwin_ch_row_field(row, 3)));
			*ids = lappend(*ids, pstrdup(dpwin_ch_row_field(row, 0)));
		}
	}
	/* as strings: the server sorts the rows as numbers */
	list_sort(result, part_cmp);
	return result;
}

/*
 * The active parts of the tables as sorted "partition\trows\thash"
 * strings; with layout, of one table, also its layout fingerprint.
 */
static List *
read_parts(ChClient *client, const char *database, List *tables, char **layout)
{
	return parts_of_rows(parts_rows(client, database, tables), NULL, NULL, NULL,
						 layout);
}

/* The rows of parts_rows() of every table but `table`. */
static List *
rows_except(List *rows, const char *table)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, rows)
		if (strcmp(dpwin_ch_row_field((List *) lfirst(lc), 3), table) != 0)
			result = lappend(result, lfirst(lc));
	return result;
}

/* The parts of parts_rows() (of `table` alone, unless NULL) as PartLines. */
static List *
part_lines(List *rows, const char *table)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, rows)
	{
		List	   *row = (List *) lfirst(lc);
		PartLine   *p;
		int64		data_version;

		if (table != NULL && strcmp(dpwin_ch_row_field(row, 3), table) != 0)
			continue;
		p = palloc0(sizeof(PartLine));
		p->partition = dpwin_ch_row_field(row, 0);
		p->rows = field_int64(row, 1);
		p->hash = dpwin_ch_row_field(row, 2);
		p->min_block = field_int64(row, 4);
		p->max_block = field_int64(row, 5);
		p->level = field_int64(row, 7);

		/* a part's data version is its mutation, or else its lowest block */
		data_version = field_int64(row, 6);
		p->mutation = data_version > p->min_block ? data_version : 0;
		result = lappend(result, p);
	}
	return result;
}

static bool
same_part(const PartLine *a, const PartLine *b)
{
	return strcmp(a->partition, b->partition) == 0 && strcmp(a->hash, b->hash) == 0 &&
		a->rows == b->rows && a->min_block == b->min_block &&
		a->max_block == b->max_block && a->level == b->level &&
		a->mutation == b->mutation;
}

/* The parts of `lines` in `partition` that `others` does not hold. */
static List *
parts_not_in(List *lines, List *others, const char *partition)
{
	List	   *result = NIL;
	ListCell   *lc;
	ListCell   *lo;

	foreach(lc, lines)
	{
		PartLine   *p = lfirst(lc);
		bool		found = false;

		if (strcmp(p->partition, partition) != 0)
			continue;
		foreach(lo, others)
			found = found || same_part(p, lfirst(lo));
		if (!found)
			result = lappend(result, p);
	}
	return result;
}

/*
 * Are the target's parts in `partitions` now exactly merges of those that
 * `before` recorded at the clone, so that they hold the same rows
 * (docs/design.md, "Why this is exact")?  Each new part must cover the
 * block numbers of recorded parts gone since, exactly and nothing else,
 * at a higher level, with their rows (a merge that drops
 * lightweight-deleted rows or duplicates lowers them) and with the
 * mutation of every one of them.  An insert, an attach or a mutation
 * after the clone takes a number above every recorded one; a patch part
 * of a lightweight update is a partition of its own.  False leaves the
 * question to the digest.
 */
static bool
merged_only(List *before, List *now, List *partitions)
{
	ListCell   *lc;
	ListCell   *lp;
	ListCell   *lg;

	foreach(lc, now)
		if (strncmp(((PartLine *) lfirst(lc))->partition, "patch-", 6) == 0)
			return false;
	foreach(lc, partitions)
	{
		const char *partition = lfirst(lc);
		List	   *gone = parts_not_in(before, now, partition);
		List	   *made = parts_not_in(now, before, partition);

		if (made == NIL)
			return false;
		foreach(lg, gone)
			((PartLine *) lfirst(lg))->covered = false;
		foreach(lp, made)
		{
			PartLine   *m = lfirst(lp);
			int64		lo = PG_INT64_MAX;
			int64		hi = PG_INT64_MIN;
			int64		rows = 0;
			int64		level = -1;

			foreach(lg, gone)
			{
				PartLine   *g = lfirst(lg);

				if (g->min_block < m->min_block || g->max_block > m->max_block)
					continue;
				if (g->covered || g->mutation != m->mutation)
					return false;
				g->covered = true;
				lo = Min(lo, g->min_block);
				hi = Max(hi, g->max_block);
				rows += g->rows;
				level = Max(level, g->level);
			}
			if (lo != m->min_block || hi != m->max_block || rows != m->rows ||
				m->level <= level)
				return false;
		}
		foreach(lg, gone)
			if (!((PartLine *) lfirst(lg))->covered)
				return false;
	}
	return true;
}

/* PartLines as sorted read_parts() entries. */
static List *
part_entries(List *lines)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, lines)
	{
		PartLine   *p = lfirst(lc);

		result = lappend(result, part_entry(p->partition, p->rows, p->hash));
	}
	list_sort(result, part_cmp);
	return result;
}

/* The target's active parts as PartLines. */
static List *
read_target_lines(ChClient *client, const DpwinTargetInfo *target)
{
	return part_lines(parts_rows(client, target->database, list_make1(target->table)), NULL);
}

/* The partition of a read_parts() entry. */
static char *
part_partition(const char *part)
{
	const char *tab = strchr(part, '\t');

	return pnstrdup(part, tab ? (Size) (tab - part) : strlen(part));
}

/*
 * Multiset difference of two sorted read_parts() lists: the partitions of
 * the parts of `a` missing from `b` and, unless subset_only, of `b`
 * missing from `a`.
 */
static List *
parts_differ(List *a, List *b, bool subset_only)
{
	List	   *differ = NIL;
	int			i = 0;
	int			j = 0;

	while (i < list_length(a) || j < list_length(b))
	{
		const char *pa = i < list_length(a) ? list_nth(a, i) : NULL;
		const char *pb = j < list_length(b) ? list_nth(b, j) : NULL;
		int			cmp = pa == NULL ? 1 : pb == NULL ? -1 : strcmp(pa, pb);

		if (cmp == 0)
		{
			i++;
			j++;
			continue;
		}
		if (cmp < 0)
		{
			differ = list_append_unique(differ, makeString(part_partition(pa)));
			i++;
		}
		else
		{
			if (!subset_only)
				differ = list_append_unique(differ, makeString(part_partition(pb)));
			j++;
		}
	}
	return differ;
}

/* makeString list -> plain char * list */
static List *
string_values(List *strings)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, strings)
		result = lappend(result, strVal(lfirst(lc)));
	return result;
}

/*
 * Digest of db.table in the partitions `only` (NIL: all), restricted by
 * where_sql when given.
 */
static void
digest_partitions(ChClient *client, const DpwinTargetInfo *target,
				  const char *table, List *only, const char *where_sql,
				  const DpwinDigestKey *key, DpwinDigest *out)
{
	StringInfoData where;

	initStringInfo(&where);
	appendStringInfoString(&where, "1");
	if (only != NIL)
		appendStringInfo(&where, " AND _partition_id IN %s", dpwin_ch_quote_literal_list(only));
	if (where_sql != NULL)
		appendStringInfo(&where, " AND %s", where_sql);
	dpwin_target_digest(client, target, table, where.data,
						DPWIN_TARGET_SCAN_SETTINGS, key, out);
}

/*
 * The target's rows outside the ranges, in one statement: per partition,
 * without reading a column (the server answers from its parts' metadata),
 * in the partitions of gen->outside, which hold no row inside the ranges;
 * counted on the window column in the others; rows a lightweight DELETE
 * removed are not counted.  With baseline, where the clone is the
 * generation before the attach (no DELETE follows), the same statement
 * counts the clone as dpwin_generation_read_baseline() does; the caller
 * records the clone's parts, read with the target's, with it.
 */
static void
count_kept(ChClient *client, const DpwinTargetInfo *target, DpwinGeneration *gen,
		   bool baseline)
{
	char	   *tbl = dpwin_ch_qualified_name(target->database, target->table);
	char	   *gtbl = dpwin_ch_qualified_name(target->database, gen->table);
	char	   *ranges_sql = window_ranges_sql(gen->window_column, gen->ranges);
	char	   *in = gen->outside != NIL ? dpwin_ch_quote_literal_list(gen->outside) : NULL;
	StringInfoData sql;
	List	   *rows;
	ListCell   *lc;
	bool		found = false;
	int64		gen_inside = 0;
	int64		gen_rows = 0;
	int64		null_rows = 0;

	/*
	 * The range count first: the first branch's row is the one whose
	 * partition is '' (no partition id is empty); the others are the
	 * partitions of gen->outside.
	 */
	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT countIf(%s), count(), ''", ranges_sql);
	if (baseline)
		appendStringInfo(&sql, ", (SELECT count() FROM %s PREWHERE %s),"
						 " (SELECT count() FROM %s PREWHERE isNull(%s)), (SELECT count() FROM %s)",
						 gtbl, ranges_filter_sql(gen->window_column, gen->ranges),
						 gtbl, dpwin_ch_quote_ident(gen->window_column), gtbl);
	else
		appendStringInfoString(&sql, ", 0, 0, 0");
	appendStringInfo(&sql, " FROM %s", tbl);
	if (in != NULL)
		appendStringInfo(&sql, " WHERE _partition_id NOT IN %s"
						 "\nUNION ALL SELECT count(), count(), _partition_id, 0, 0, 0 FROM %s"
						 " WHERE _partition_id IN %s GROUP BY _partition_id",
						 in, tbl, in);
	appendStringInfoString(&sql, " SETTINGS " DPWIN_TARGET_SCAN_SETTINGS);
	rows = dpwin_ch_parse_tsv(dpwin_ch_exec(client, sql.data));

	gen->outside_rows = NIL;
	gen->target_kept_rows = 0;
	foreach(lc, rows)
	{
		List	   *row = (List *) lfirst(lc);
		PartitionMeta *p;

		if (list_length(row) != 6)
			ereport(ERROR,
					(errcode(ERRCODE_PROTOCOL_VIOLATION),
					 errmsg("unexpected answer from ClickHouse counting the rows of %s", tbl)));
		if (dpwin_ch_row_field(row, 2)[0] != '\0')
		{
			p = palloc0(sizeof(PartitionMeta));
			p->id = pstrdup(dpwin_ch_row_field(row, 2));
			p->rows = pg_strtoint64(dpwin_ch_row_field(row, 1));
			gen->outside_rows = lappend(gen->outside_rows, p);
			gen->target_kept_rows += p->rows;
			continue;
		}
		if (found)
			ereport(ERROR,
					(errcode(ERRCODE_PROTOCOL_VIOLATION),
					 errmsg("unexpected answer from ClickHouse counting the rows of %s", tbl)));
		found = true;
		gen->target_kept_rows += pg_strtoint64(dpwin_ch_row_field(row, 1)) -
			pg_strtoint64(dpwin_ch_row_field(row, 0));
		gen_inside = pg_strtoint64(dpwin_ch_row_field(row, 3));
		null_rows = pg_strtoint64(dpwin_ch_row_field(row, 4));
		gen_rows = pg_strtoint64(dpwin_ch_row_field(row, 5));
	}
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("unexpected answer from ClickHouse counting the rows of %s", tbl)));

	/* as dpwin_generation_read_baseline() judges them */
	if (baseline)
	{
		gen->baseline_null_rows = null_rows;
		gen->baseline_counted = true;
		gen->baseline_counted_ok = gen_inside == 0 && gen_rows == gen->target_kept_rows;
	}
}

/* count_kept(); a failure gives up the statement started on aside first. */
static void
count_aside(ChClient *client, ChClient *started, const DpwinTargetInfo *target,
			DpwinGeneration *gen, bool baseline)
{
	ChClient   *volatile aside = started;

	PG_TRY();
	{
		count_kept(client, target, gen, baseline);
	}
	PG_CATCH();
	{
		dpwin_ch_abandon(aside);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* Is id one of the strings of ids? */
static bool
id_member(List *ids, const char *id)
{
	ListCell   *lc;

	foreach(lc, ids)
	{
		if (strcmp((const char *) lfirst(lc), id) == 0)
			return true;
	}
	return false;
}

/* The read_parts() entries of the partitions in `only`. */
static List *
parts_of(List *parts, List *only)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, parts)
	{
		char	   *part = lfirst(lc);

		if (id_member(only, part_partition(part)))
			result = lappend(result, part);
	}
	return result;
}

/*
 * DROP TABLE IF EXISTS name, then CREATE TABLE name AS the target; a
 * failure gives up the statement started on `started` (not NULL) first.
 */
static void
create_copy(ChClient *client, ChClient *started, const DpwinTargetInfo *target,
			const char *name)
{
	ChClient   *volatile aside = started;

	PG_TRY();
	{
		dpwin_target_drop_table(client, target->database, name);
		dpwin_target_create_unchecked(client, target, name);
	}
	PG_CATCH();
	{
		if (aside != NULL)
			dpwin_ch_abandon(aside);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/*
 * Create the generation as a copy of the target, any table of its name
 * dropped first, and judge the target's partitions.  With aside (a client
 * of its own, idle), the judgement reads the target on it meanwhile: it
 * depends on the target alone.
 */
static List *
create_generation(ChClient *client, ChClient *aside, const DpwinTargetInfo *target,
				  DpwinGeneration *gen)
{
	bool		judge = target->partition_key[0] != '\0' && gen->ranges != NIL;
	ChClient   *started = judge ? aside : NULL;
	List	   *partitions;
	ListCell   *lc;

	if (started != NULL)
		classify_start(started, target, gen->window_column);
	create_copy(client, started, target, gen->table);

	if (target->partition_key[0] == '\0')
	{
		partitions = all_partitions(client, target);
		gen->minmax_why_not = pstrdup("the target has no partition key");
	}
	else if (gen->ranges == NIL)
	{
		/* nothing is replaced (yet): every partition is cloned, unjudged */
		partitions = all_partitions(client, target);
		foreach(lc, partitions)
			((PartitionMeta *) lfirst(lc))->class = PART_OUTSIDE;
		gen->minmax_why_not = pstrdup("no range is replaced");
	}
	else
		partitions = classify_partitions(client, started, target, gen->window_column,
										 gen->ranges, true, &gen->minmax_why_not);
	gen->minmax_used = gen->minmax_why_not == NULL;
	return partitions;
}

/* attach_partitions(); a failure gives up the statement on aside first. */
static void
attach_aside(ChClient *client, ChClient *started, const char *database,
			 List *ids, List *sources, const char *generation)
{
	ChClient   *volatile aside = started;

	PG_TRY();
	{
		attach_partitions(client, database, ids, sources, generation);
	}
	PG_CATCH();
	{
		dpwin_ch_abandon(aside);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/*
 * Clone the partitions `outside` of the target into the generation, which
 * create_generation() made, and check that it is a copy of the target as
 * admitted, reading its UUID.  With aside, the check reads the catalog on
 * it while the clone runs: the clone changes the generation's parts, never
 * its structure, and a generation that fails the check is dropped as any
 * failed one is, before anything is published.
 */
static void
clone_outside(ChClient *client, ChClient *aside, const DpwinTargetInfo *target,
			  DpwinGeneration *gen, List *outside, List *sources)
{
	if (aside == NULL || outside == NIL)
	{
		gen->uuid = dpwin_target_check_like(client, target, gen->table);
		if (outside != NIL)
			attach_partitions(client, target->database, outside, sources, gen->table);
		return;
	}
	dpwin_target_check_like_start(aside, target, gen->table);
	attach_aside(client, aside, target->database, outside, sources, gen->table);
	gen->uuid = dpwin_target_check_like_finish(aside, target, gen->table);
}

DpwinGeneration *
dpwin_generation_clone(ChClient *client, ChClient *aside,
					   const DpwinTargetInfo *target,
					   const char *window_column, List *ranges,
					   const char *name, const DpwinDigestKey *key)
{
	DpwinGeneration *gen = palloc0(sizeof(DpwinGeneration));
	List	   *partitions;
	List	   *cloned = NIL;
	List	   *outside = NIL;
	List	   *sources = NIL;
	List	   *clone_tables = list_make1((char *) name);
	List	   *clone_parts;
	List	   *differ;
	List	   *rows;
	List	   *parts_tables;
	bool		baseline;
	ListCell   *lc;

	gen->table = pstrdup(name);
	gen->window_column = window_column;
	gen->ranges = ranges;
	partitions = create_generation(client, aside, target, gen);
	gen->partitions = list_length(partitions);
	foreach(lc, partitions)
	{
		PartitionMeta *p = lfirst(lc);

		gen->target_rows += p->rows;
		if (p->class == PART_INSIDE)
		{
			gen->dropped_partitions++;
			continue;
		}
		cloned = lappend(cloned, p->id);
		if (p->class == PART_MIXED)
		{
			gen->mixed = lappend(gen->mixed, p->id);
			gen->cut_rows += p->rows;
		}
		else
		{
			outside = lappend(outside, p->id);
			sources = lappend(sources, target->table);
		}
		gen->cloned_parts += p->parts;
		gen->cloned_rows += p->rows;
	}
	gen->cloned_partitions = list_length(cloned);
	clone_outside(client, aside, target, gen, outside, sources);

	/*
	 * Partitions that hold rows on both sides of a range are cloned into a
	 * scratch table, where the DELETE runs: a DELETE costs time for every
	 * part of its table, so it runs on these partitions' parts alone
	 * (docs/design.md, "Building the generation").
	 */
	if (gen->mixed != NIL)
	{
		List	   *from = NIL;

		gen->deleted = true;
		gen->scratch = psprintf("%s_del", name);
		dpwin_target_drop_table(client, target->database, gen->scratch);
		dpwin_target_create_like(client, target, gen->scratch);
		for (int i = 0; i < list_length(gen->mixed); i++)
			from = lappend(from, target->table);
		attach_partitions(client, target->database, gen->mixed, from, gen->scratch);
		clone_tables = lappend(clone_tables, gen->scratch);
	}

	/*
	 * The clone is the target, file for file, if their parts are equal now;
	 * where a merge on either side has already changed them, the rows are.
	 * Both are read in one statement: one snapshot of system.parts.  With
	 * aside, it runs there while the first connection counts the rows: the
	 * two reads depend on nothing of each other.
	 */
	gen->outside = outside;
	baseline = ranges != NIL && gen->mixed == NIL;
	parts_tables = lappend(list_copy(clone_tables), target->table);
	if (aside != NULL)
	{
		dpwin_ch_start(aside, dpwin_target_parts_sql(target->database, parts_tables),
					   "parts");
		count_aside(client, aside, target, gen, baseline);
		rows = dpwin_ch_parse_tsv(dpwin_ch_finish(aside));
	}
	else
	{
		rows = parts_rows(client, target->database, parts_tables);
		count_kept(client, target, gen, baseline);
	}
	gen->target_lines = part_lines(rows, target->table);
	gen->target_parts = part_entries(gen->target_lines);
	clone_parts = parts_of_rows(rows_except(rows, target->table), NULL, NULL,
								NULL, NULL);
	differ = string_values(parts_differ(parts_of(gen->target_parts, cloned),
										clone_parts, false));
	if (differ == NIL && gen->mixed == NIL)
		gen->clone_parts = clone_parts;
	if (differ != NIL)
	{
		DpwinDigest t;
		DpwinDigest g;

		digest_partitions(client, target, target->table, differ, NULL, key, &t);
		digest_partitions(client, target, name, differ, NULL, key, &g);
		if (gen->scratch != NULL)
		{
			DpwinDigest d;

			digest_partitions(client, target, gen->scratch, differ, NULL, key, &d);
			dpwin_digest_merge(&g, &d);
		}
		gen->digest_checks++;
		if (!dpwin_digest_equal(&t, &g))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("target %s changed while it was cloned",
							dpwin_ch_qualified_name(target->database, target->table)),
					 errdetail("Partitions %s hold %s in the target and %s in its clone.",
							   dpwin_ch_quote_literal_list(differ), dpwin_digest_to_text(&t),
							   dpwin_digest_to_text(&g)),
					 errhint("Hold dpwin.lock_target() in other writers of the target.")));
	}
	gen->parts_known = true;
	if (baseline)
		gen->baseline_parts = clone_parts;
	return gen;
}

bool
dpwin_generation_narrow(ChClient *client, const DpwinTargetInfo *target,
						DpwinGeneration *gen, List *ranges)
{
	List	   *partitions;
	List	   *drop = NIL;
	List	   *outside = NIL;
	List	   *outside_rows = NIL;
	List	   *clauses = NIL;
	char	   *why_not = NULL;
	int64		parts = 0;
	int64		rows = 0;
	ListCell   *lc;

	if (gen->ranges != NIL || gen->mixed != NIL)
		return false;
	/* judged from the minmax indexes only: a scan is what a new clone costs */
	partitions = classify_partitions(client, NULL, target, gen->window_column, ranges,
									 false, &why_not);
	if (why_not != NULL)
		return false;
	foreach(lc, partitions)
	{
		PartitionMeta *p = lfirst(lc);

		if (p->class == PART_MIXED)
			return false;
		if (p->class == PART_INSIDE)
		{
			drop = lappend(drop, p->id);
			parts += p->parts;
			rows += p->rows;
		}
	}

	/*
	 * That judgement is the clone's only while the target's parts are still
	 * those cloned.  Read after it: a change before the read shows here.
	 */
	if (!dpwin_generation_parts_equal(read_parts(client, target->database,
												 list_make1(target->table), NULL),
									  gen->target_parts))
		return false;
	foreach(lc, drop)
		clauses = lappend(clauses, psprintf("DROP PARTITION ID %s",
											dpwin_ch_quote_literal((const char *) lfirst(lc))));
	alter_in_batches(client, target->database, gen->table, clauses,
					 "dropping partitions of");
	gen->baseline_counted = false;

	/* What the clone now keeps: the target's partitions outside the ranges. */
	gen->ranges = ranges;
	gen->minmax_used = true;
	gen->minmax_why_not = NULL;
	gen->dropped_partitions = list_length(drop);
	gen->cloned_partitions -= list_length(drop);
	gen->cloned_parts -= parts;
	gen->cloned_rows -= rows;
	gen->target_kept_rows = 0;
	foreach(lc, gen->outside_rows)
	{
		PartitionMeta *p = lfirst(lc);

		if (id_member(drop, p->id))
			continue;
		outside_rows = lappend(outside_rows, p);
		gen->target_kept_rows += p->rows;
	}
	foreach(lc, gen->outside)
	{
		if (!id_member(drop, (const char *) lfirst(lc)))
			outside = lappend(outside, lfirst(lc));
	}
	gen->outside = outside;
	gen->outside_rows = outside_rows;
	if (gen->clone_parts != NIL)
		gen->clone_parts = parts_of(gen->clone_parts, outside);
	return true;
}

void
dpwin_generation_remove_ranges(ChClient *client, const DpwinTargetInfo *target,
							   DpwinGeneration *gen)
{
	const char *table = gen->scratch ? gen->scratch : gen->table;
	const char *qtable = dpwin_ch_qualified_name(target->database, table);
	const char *where = window_ranges_sql(gen->window_column, gen->ranges);
	char	   *query_id;
	ChHttpReply reply;
	ChHttpStatus status;
	bool		setting = true;

	/* Every cloned partition lies outside the ranges: nothing to remove. */
	if (!gen->deleted)
		return;
	gen->baseline_counted = false;

	/*
	 * Where the cut partitions are a small part of a partitioned target, one
	 * mutation rewrites them without the rows inside the ranges: the
	 * published target has no part with lightweight-deleted rows of dpwin's
	 * making, so the next refresh judges its partitions from the minmax
	 * indexes again instead of reading the window column of every row.
	 * Where they hold more than a quarter of its rows (an unpartitioned
	 * target, a month cut in a two-month table), rewriting them costs more
	 * than that read: a lightweight DELETE masks the rows, as ClickHouse
	 * users do, and merges drop them later (docs/design.md, "Building the
	 * generation").
	 *
	 * mutations_sync and lightweight_deletes_sync = 2: the statement returns
	 * once the rows are gone (pinned against a profile that changes them);
	 * a server older than lightweight_deletes_sync waits by mutations_sync.
	 */
	gen->rewritten = target->partition_key[0] != '\0' &&
		gen->cut_rows <= gen->target_rows / REWRITE_SHARE;
	for (;;)
	{
		query_id = dpwin_ch_next_query_id(client, "delete");
		status = dpwin_ch_try(client,
							  gen->rewritten ?
							  psprintf("ALTER TABLE %s DELETE WHERE %s SETTINGS mutations_sync = 2",
									   qtable, where) :
							  psprintf("DELETE FROM %s WHERE %s SETTINGS %s = 2",
									   qtable, where,
									   setting ? "lightweight_deletes_sync" : "mutations_sync"),
							  query_id, NULL, NULL, &reply);
		if (status == CHHTTP_SERVER_ERROR && !gen->rewritten &&
			reply.exception_code == CH_UNKNOWN_SETTING && setting)
		{
			setting = false;
			continue;
		}
		break;
	}
	if (status != CHHTTP_OK)
		report_settled(client, status, &reply, query_id,
					   psprintf("removing the window's rows from %s", qtable));

	/* The scratch table's parts join the generation. */
	if (gen->scratch != NULL)
	{
		List	   *from = NIL;

		for (int i = 0; i < list_length(gen->mixed); i++)
			from = lappend(from, gen->scratch);
		attach_partitions(client, target->database, gen->mixed, from, gen->table);
		dpwin_target_drop_table(client, target->database, gen->scratch);
		gen->scratch = NULL;
	}
}

void
dpwin_generation_staged_parts_start(ChClient *client, const char *database,
									List *staging_tables)
{
	dpwin_ch_start(client, dpwin_target_parts_sql(database, staging_tables), "parts");
}

void
dpwin_generation_attach_staged(ChClient *client, const DpwinTargetInfo *target,
							   DpwinGeneration *gen, const DpwinStaged *staged,
							   const DpwinDigestKey *key,
							   void (*attached) (void *arg), void *arg)
{
	char	   *ranges_sql = window_ranges_sql(gen->window_column, gen->ranges);
	List	   *staged_parts = NIL;
	List	   *rows;
	List	   *gen_parts;
	List	   *ids = NIL;

	if (staged->tables != NIL)
	{
		List	   *sources = NIL;

		rows = staged->parts_from != NULL ?
			dpwin_ch_parse_tsv(dpwin_ch_finish(staged->parts_from)) :
			parts_rows(client, target->database, staged->tables);
		staged_parts = parts_of_rows(rows, NULL, &sources, &ids, NULL);
		gen->attached_parts = list_length(staged_parts);
		if (ids != NIL)
			attach_partitions(client, target->database, ids, sources, gen->table);
	}

	/*
	 * The generation holds every row it will publish: what the caller reads
	 * from it meanwhile on another connection (the window's facts and the
	 * counts the caller checks) is what the checks below
	 * verify, or they fail.
	 */
	if (attached != NULL)
		attached(arg);

	/*
	 * The staged parts, file for file; after a merge in the generation, the
	 * rows inside the ranges by digest.  The target's parts come in the same
	 * statement, for dpwin_generation_check_target().
	 */
	rows = parts_rows(client, target->database, list_make2(gen->table, target->table));
	gen_parts = parts_of_rows(rows, gen->table, NULL, NULL, &gen->layout);
	gen->target_lines_now = part_lines(rows, target->table);
	gen->target_parts_read = true;
	gen->staged_parts = staged_parts;
	gen->attached_parts_now = gen_parts;
	if (parts_differ(staged_parts, gen_parts, true) != NIL)
	{
		DpwinDigest g;

		digest_partitions(client, target, gen->table, NIL, ranges_sql, key, &g);
		gen->digest_checks++;
		if (!dpwin_digest_equal(&g, staged->digest))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("generation %s does not hold the staged rows", gen->table),
					 errdetail("Its rows inside the window are %s, the staged rows %s.",
							   dpwin_digest_to_text(&g),
							   dpwin_digest_to_text(staged->digest))));
	}
}

void
dpwin_generation_read_baseline(ChClient *client, const DpwinTargetInfo *target,
							   DpwinGeneration *gen)
{
	char	   *tbl = dpwin_ch_qualified_name(target->database, gen->table);
	List	   *rows;
	List	   *row;

	/* counted with the target, right after the clone: nothing changed it */
	if (gen->baseline_counted)
	{
		gen->baseline_known = gen->baseline_counted_ok;
		return;
	}
	gen->baseline_known = false;
	gen->baseline_parts = read_parts(client, target->database,
									 list_make1(gen->table), NULL);

	/*
	 * PREWHERE on the ranges reads the window column of the parts that may
	 * hold rows inside them only (ranges_filter_sql()); the NULL rows are
	 * counted from the NULL map, the rows from the parts' counts and delete
	 * masks.
	 */
	rows = dpwin_ch_parse_tsv(dpwin_ch_exec(client,
											psprintf("SELECT (SELECT count() FROM %s PREWHERE %s),"
													 " (SELECT count() FROM %s PREWHERE isNull(%s)),"
													 " (SELECT count() FROM %s)",
													 tbl, ranges_filter_sql(gen->window_column, gen->ranges),
													 tbl, dpwin_ch_quote_ident(gen->window_column), tbl)));
	row = list_length(rows) == 1 ? (List *) linitial(rows) : NIL;
	if (list_length(row) != 3)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("unexpected answer from ClickHouse counting the rows of %s", tbl)));
	gen->baseline_null_rows = pg_strtoint64(dpwin_ch_row_field(row, 1));
	gen->baseline_known = pg_strtoint64(dpwin_ch_row_field(row, 0)) == 0 &&
		pg_strtoint64(dpwin_ch_row_field(row, 2)) == gen->target_kept_rows;
}

/* The rows of a list of "partition\trows\thash" parts. */
static int64
rows_of_parts(List *parts)
{
	ListCell   *lc;
	int64		rows = 0;

	foreach(lc, parts)
		rows += strtoi64(strchr((const char *) lfirst(lc), '\t') + 1, NULL, 10);
	return rows;
}

bool
dpwin_generation_baseline_from_clone(DpwinGeneration *gen, int64 null_window_rows)
{
	/*
	 * A part's rows include those a lightweight DELETE masked, which the
	 * kept rows, counted, do not: then the sums differ, and the clone is
	 * counted.
	 */
	if (gen->clone_parts == NIL || rows_of_parts(gen->clone_parts) != gen->target_kept_rows)
		return false;
	gen->baseline_parts = gen->clone_parts;
	gen->baseline_null_rows = null_window_rows;
	gen->baseline_known = true;
	return true;
}

bool
dpwin_generation_parts_add_up(DpwinGeneration *gen, int64 *rows)
{
	List	   *expect;

	if (!gen->baseline_known || gen->attached_parts_now == NIL)
		return false;
	/* parts_of_rows() sorted each list; their union is sorted here */
	expect = list_concat_copy(gen->baseline_parts, gen->staged_parts);
	list_sort(expect, part_cmp);
	if (parts_differ(expect, gen->attached_parts_now, false) != NIL)
		return false;
	*rows = gen->target_kept_rows + rows_of_parts(gen->staged_parts);
	gen->counted_by_parts = true;
	return true;
}

char *
dpwin_generation_ranges_sql(const DpwinGeneration *gen)
{
	return window_ranges_sql(gen->window_column, gen->ranges);
}

DpwinRefusal *
dpwin_generation_check_target(ChClient *client, const DpwinTargetInfo *target,
							  DpwinGeneration *gen, const DpwinDigestKey *key,
							  const char *when)
{
	char	   *keep_sql;
	List	   *differ = NIL;
	DpwinDigest t;
	DpwinDigest g;
	DpwinRefusal *refusal;

	if (gen->parts_known)
	{
		List	   *now_lines = gen->target_lines_now;

		if (!gen->target_parts_read)
			now_lines = read_target_lines(client, target);
		gen->target_lines_now = NIL;
		gen->target_parts_read = false;
		differ = string_values(parts_differ(gen->target_parts, part_entries(now_lines), false));
		if (differ == NIL)
			return NULL;

		/* Only merged: the same rows in fewer parts. */
		if (merged_only(gen->target_lines, now_lines, differ))
		{
			gen->merged_partitions += list_length(differ);
			return NULL;
		}
	}

	/* Same rows in other parts (a merge), or a change of the target? */
	keep_sql = psprintf("NOT %s", window_ranges_sql(gen->window_column, gen->ranges));
	digest_partitions(client, target, target->table, differ, keep_sql, key, &t);
	digest_partitions(client, target, gen->table, differ, keep_sql, key, &g);
	gen->digest_checks++;
	if (dpwin_digest_equal(&t, &g))
		return NULL;

	refusal = palloc(sizeof(DpwinRefusal));
	refusal->sqlerrcode = ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
	refusal->message = psprintf("target %s changed outside the window %s",
								dpwin_ch_qualified_name(target->database, target->table),
								when);
	refusal->detail = psprintf("Rows outside the window are %s in the target and %s in the generation.",
							   dpwin_digest_to_text(&t), dpwin_digest_to_text(&g));
	refusal->hint = pstrdup("The changed target is kept as it is. Hold dpwin.lock_target() in other writers, then start a new invocation.");
	return refusal;
}

List *
dpwin_generation_target_parts(ChClient *client, const DpwinTargetInfo *target,
							  char **layout)
{
	return read_parts(client, target->database, list_make1(target->table), layout);
}

bool
dpwin_generation_parts_equal(List *a, List *b)
{
	return parts_differ(a, b, false) == NIL;
}
