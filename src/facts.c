/*-------------------------------------------------------------------------
 *
 * facts.c
 *	  The window's facts for the evidence, read with each chunk's staging
 *	  digest (facts.h).
 *
 *	  The staging digest reads every row of a chunk anyway; the same read
 *	  yields the chunk's rows per UTC day, its lowest and highest window
 *	  value and its rows inside the window, in the worker, while the next
 *	  chunk loads.  A refresh that skips unchanged chunks reads the same
 *	  facts of the chunks it keeps from the target, while its workers
 *	  read the source.  Added up, they describe the generation's window
 *	  once its parts are shown to be the kept and the staged ones
 *	  (docs/design.md, "Building the generation"), so that no statement
 *	  reads the window again between the attach and the exchange.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"

#include "facts.h"

/* floor(a / b) for b > 0 */
static int64
floor_div(int64 a, int64 b)
{
	return a / b - (a % b < 0 ? 1 : 0);
}

/*
 * The UTC days that the part of the window [lo, hi) in the chunk [clo,
 * chi) touches: the first (in days from 2000-01-01) and how many.
 */
static int
chunk_days(TimestampTz clo, TimestampTz chi, TimestampTz lo, TimestampTz hi,
		   int64 *first)
{
	TimestampTz from = Max(clo, lo);
	TimestampTz to = Min(chi, hi);

	*first = 0;
	if (to <= from)
		return 0;
	*first = floor_div(from, USECS_PER_DAY);
	return (int) (floor_div(to - 1, USECS_PER_DAY) - *first + 1);
}

char *
dpwin_facts_chunk_sql(const DpwinTargetInfo *target, const char *window_column,
					  const DpwinChunkSlot *slot, TimestampTz lo, TimestampTz hi)
{
	char	   *w = dpwin_ch_quote_ident(window_column);
	char	   *in = dpwin_target_window_predicate(target, window_column, lo, hi);
	StringInfoData before;
	int64		first;
	int			ndays = chunk_days(slot->lo, slot->hi, lo, hi, &first);

	/*
	 * On the window's predicate, not the chunk's: the rows the server
	 * places inside the window are what the build's count check compares
	 * with the staged rows, as when it read them from the generation.  The
	 * window column is DateTime64 in UTC, so the rows of each UTC day
	 * follow from the rows before each midnight inside the chunk: a
	 * comparison with a constant a row, where grouping by the day would
	 * cost the digest a tenth more (docs/design.md, "The conversation with
	 * ClickHouse").
	 */
	initStringInfo(&before);
	for (int d = 1; d < ndays && ndays <= DPWIN_FACT_MAX_DAYS; d++)
		appendStringInfo(&before, "%scountIf(%s AND %s < %s)", d > 1 ? ", " : "",
						 in, w, dpwin_target_bound_sql((first + d) * USECS_PER_DAY,
													   "midnight"));
	return psprintf("countIf(%s), [%s], toString(minOrNullIf(%s, %s)), toString(maxOrNullIf(%s, %s))",
					in, before.data, w, in, w, in);
}

/* Copy value (NULL: "") into a slot's field of size len; false if it does not fit. */
static bool
store_text(char *field, size_t len, const char *value)
{
	if (value == NULL)
		value = "";
	if (strlen(value) >= len)
		return false;
	strlcpy(field, value, len);
	return true;
}

void
dpwin_facts_chunk_store(DpwinChunkSlot *slot, TimestampTz lo, TimestampTz hi,
						List *values)
{
	DpwinChunkFacts *f = &slot->facts;
	const char *before = list_nth(values, 1);
	int64		prior = 0;
	int			d = 0;

	Assert(list_length(values) == DPWIN_FACTS_CHUNK_COLUMNS);
	f->known = false;
	f->window_rows = pg_strtoint64(dpwin_ch_row_field(values, 0));
	f->ndays = chunk_days(slot->lo, slot->hi, lo, hi, &f->first_day);
	if (f->ndays > DPWIN_FACT_MAX_DAYS || before == NULL || before[0] != '[' ||
		!store_text(f->window_min, sizeof(f->window_min), list_nth(values, 2)) ||
		!store_text(f->window_max, sizeof(f->window_max), list_nth(values, 3)))
		return;

	/* "[a,b,...]": the rows before each midnight, then all of them */
	for (const char *p = before + 1; *p != ']' && *p != '\0' && d < f->ndays - 1; d++)
	{
		char	   *end;
		int64		n = strtoi64(p, &end, 10);

		if (end == p || n < prior)
			return;
		f->day_rows[d] = n - prior;
		prior = n;
		p = *end == ',' ? end + 1 : end;
	}
	if (f->ndays > 0)
	{
		if (d != f->ndays - 1 || f->window_rows < prior)
			return;
		f->day_rows[d] = f->window_rows - prior;
	}
	else if (f->window_rows != 0)
		return;
	f->known = true;
}

/*
 * Add one (chunk, UTC day) group of the target's answer to its chunk's
 * facts; the day comes in days from 1970-01-01.
 */
static void
add_target_day(DpwinChunkFacts *f, List *row)
{
	int64		day = pg_strtoint64(dpwin_ch_row_field(row, 1)) -
		(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) - f->first_day;
	int64		n = pg_strtoint64(dpwin_ch_row_field(row, 2));

	if (!f->known)
		return;
	if (day < 0 || day >= f->ndays ||
		(f->window_min[0] == '\0' &&
		 !store_text(f->window_min, sizeof(f->window_min), dpwin_ch_row_field(row, 3))) ||
		!store_text(f->window_max, sizeof(f->window_max), dpwin_ch_row_field(row, 4)))
	{
		f->known = false;
		return;
	}
	f->day_rows[day] += n;
	f->window_rows += n;
}

DpwinChunkFacts *
dpwin_facts_read_target(ChClient *client, const DpwinTargetInfo *target,
						const char *window_column, List *chunks,
						TimestampTz lo, TimestampTz hi, int64 *null_window_rows)
{
	char	   *tbl = dpwin_ch_qualified_name(target->database, target->table);
	char	   *index = dpwin_target_chunk_index_sql(window_column, chunks);
	char	   *w = dpwin_ch_quote_ident(window_column);
	int			nchunks = list_length(chunks);
	DpwinChunkFacts *facts;
	List	   *rows;
	ListCell   *lc;
	int			i = 0;
	bool		ok;

	if (index == NULL)
		return NULL;
	facts = palloc0(sizeof(DpwinChunkFacts) * nchunks);
	foreach(lc, chunks)
	{
		DpwinChunkBounds *b = lfirst(lc);
		DpwinChunkFacts *f = &facts[i++];

		f->ndays = chunk_days(b->lo, b->hi, lo, hi, &f->first_day);
		f->known = f->ndays <= DPWIN_FACT_MAX_DAYS;
	}

	/*
	 * On the window's predicate, as the staging digests read them; a row's
	 * UTC day is its date, the window column being DateTime64 in UTC, as a
	 * number (a Date32 in text would need parsing here).  The
	 * groups come in order, so a chunk's first holds its lowest value and
	 * its last its highest.  The rows whose window value is NULL, from the
	 * NULL map alone, come as chunk 0.  The aliases are prefixed so that
	 * they cannot shadow a column.
	 */
	rows = dpwin_ch_parse_tsv(dpwin_ch_exec(client,
											psprintf("SELECT * FROM (SELECT %s AS __dpwin_chunk, toInt64(toDate32(%s)) AS __dpwin_day,"
													 " count(), toString(min(%s)), toString(max(%s))"
													 " FROM %s PREWHERE %s GROUP BY __dpwin_chunk, __dpwin_day"
													 " UNION ALL SELECT 0, NULL, count(), NULL, NULL FROM %s PREWHERE isNull(%s))"
													 " ORDER BY __dpwin_chunk, __dpwin_day"
													 " FORMAT TabSeparated",
													 index, w, w, w, tbl,
													 dpwin_target_window_predicate(target, window_column, lo, hi),
													 tbl, w)));
	*null_window_rows = 0;
	ok = rows != NIL;
	foreach(lc, rows)
	{
		List	   *row = lfirst(lc);
		int			chunk = list_length(row) == 5 ? atoi(dpwin_ch_row_field(row, 0)) : -1;

		/* chunk 0 first and only there, then the chunks' days */
		if (chunk < 0 || chunk > nchunks || (chunk == 0) != (foreach_current_index(lc) == 0))
		{
			ok = false;
			break;
		}
		if (chunk == 0)
			*null_window_rows = pg_strtoint64(dpwin_ch_row_field(row, 2));
		else
			add_target_day(&facts[chunk - 1], row);
	}
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("unexpected answer from ClickHouse to the window's facts of %s", tbl)));
	return facts;
}

/* A JSON string, or null for NULL. */
static void
json_string_or_null(StringInfo buf, const char *value)
{
	if (value == NULL)
		appendStringInfoString(buf, "null");
	else
		escape_json(buf, value);
}

/* Append a UTC day with rows to the JSON arrays, as toString(Date32). */
static void
append_day(StringInfo days, StringInfo rows, int64 day, int64 n)
{
	int			y;
	int			m;
	int			d;
	char	   *text;

	j2date((int) (day + POSTGRES_EPOCH_JDATE), &y, &m, &d);
	text = psprintf("%04d-%02d-%02d", y, m, d);
	if (days->len > 0)
	{
		appendStringInfoChar(days, ',');
		appendStringInfoChar(rows, ',');
	}
	escape_json(days, text);
	appendStringInfo(rows, INT64_FORMAT, n);
}

bool
dpwin_facts_from_chunks(const DpwinChunkSlot *slots, int nslots,
						const DpwinChunkFacts *kept, int64 null_window_rows,
						DpwinWindowFacts *facts)
{
	StringInfoData days;
	StringInfoData rows;
	StringInfoData bounds;
	const char *min = NULL;
	const char *max = NULL;
	int64		window_rows = 0;
	int64		day = 0;		/* the day being added up ... */
	int64		day_rows = 0;	/* ... and its rows so far */

	initStringInfo(&days);
	initStringInfo(&rows);
	facts->ranges_rows = 0;
	for (int i = 0; i < nslots; i++)
	{
		const DpwinChunkSlot *s = &slots[i];
		const DpwinChunkFacts *f;

		if (s->result == DPWIN_CHUNK_VERIFIED)
		{
			f = &s->facts;
			facts->ranges_rows += f->window_rows;
		}
		else if (s->result == DPWIN_CHUNK_SKIPPED && kept != NULL)
			f = &kept[i];
		else
			return false;
		if (!f->known)
			return false;
		/* the chunks follow one another: the days and bounds come in order */
		Assert(i == 0 || s->lo >= slots[i - 1].hi);
		window_rows += f->window_rows;
		if (f->window_rows > 0)
		{
			if (min == NULL)
				min = f->window_min;
			max = f->window_max;
		}
		for (int d = 0; d < f->ndays; d++)
		{
			if (f->day_rows[d] == 0)
				continue;
			if (day_rows > 0 && day != f->first_day + d)
			{
				append_day(&days, &rows, day, day_rows);
				day_rows = 0;
			}
			day = f->first_day + d;
			day_rows += f->day_rows[d];
		}
	}
	if (day_rows > 0)
		append_day(&days, &rows, day, day_rows);

	/* as the server's toJSONString() writes them (chprobe.c) */
	facts->days = psprintf("{\"days\":[%s],\"rows\":[%s]}", days.data, rows.data);
	initStringInfo(&bounds);
	appendStringInfoString(&bounds, "{\"min\":");
	json_string_or_null(&bounds, min);
	appendStringInfoString(&bounds, ",\"max\":");
	json_string_or_null(&bounds, max);
	appendStringInfo(&bounds, ",\"window_rows\":" INT64_FORMAT ",\"null_window_rows\":" INT64_FORMAT "}",
					 window_rows, null_window_rows);
	facts->bounds = bounds.data;
	return true;
}
