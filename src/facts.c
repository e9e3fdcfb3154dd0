/*-------------------------------------------------------------------------
 *
 * facts.c
 *	  The window's facts for the evidence, read with each chunk's staging
 *	  digest (facts.h).
 *
 *	  The staging digest reads every row of a chunk anyway; the same read
 *	  yields the chunk's rows per UTC day, its lowest and highest window
 *	  value and its rows inside the window, in the worker, while the next
 *	  chunk loads.  Added up, they describe the generation's window once
 *	  its parts are shown to be the staged ones (docs/design.md, "Building
 *	  the generation"), so that no statement reads the window again
 *	  between the attach and the exchange.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "utils/builtins.h"
#include "utils/json.h"

#include "facts.h"

char *
dpwin_facts_chunk_sql(const DpwinTargetInfo *target, const char *window_column,
					  TimestampTz lo, TimestampTz hi)
{
	char	   *w = dpwin_ch_quote_ident(window_column);
	char	   *in = dpwin_target_window_predicate(target, window_column, lo, hi);

	/*
	 * On the window's predicate, not the chunk's: the rows the server
	 * places inside the window are what the build's count check compares
	 * with the staged rows, as when it read them from the generation.  The
	 * days come sorted, as "day:rows" joined by commas; a value inside the
	 * window is never NULL.
	 */
	return psprintf("countIf(%s), arrayStringConcat(arrayMap((d, n) -> concat(toString(d), ':', toString(n)),"
					" (sumMapIf([toDate32(assumeNotNull(%s))], [toUInt64(1)], %s) AS _dpwin_days).1,"
					" _dpwin_days.2), ','),"
					" toString(minOrNullIf(%s, %s)), toString(maxOrNullIf(%s, %s))",
					in, w, in, w, in, w, in);
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
dpwin_facts_chunk_store(DpwinChunkSlot *slot, List *values)
{
	Assert(list_length(values) == DPWIN_FACTS_CHUNK_COLUMNS);
	slot->window_rows = pg_strtoint64(dpwin_ch_row_field(values, 0));
	slot->facts_known =
		store_text(slot->window_days, sizeof(slot->window_days), list_nth(values, 1)) &&
		store_text(slot->window_min, sizeof(slot->window_min), list_nth(values, 2)) &&
		store_text(slot->window_max, sizeof(slot->window_max), list_nth(values, 3));
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

bool
dpwin_facts_from_chunks(const DpwinChunkSlot *slots, int nslots,
						int64 null_window_rows, DpwinWindowFacts *facts)
{
	StringInfoData days;
	StringInfoData rows;
	StringInfoData bounds;
	const char *min = NULL;
	const char *max = NULL;
	char	   *day = NULL;		/* the day being added up */
	int64		day_rows = 0;
	int			ndays = 0;

	initStringInfo(&days);
	initStringInfo(&rows);
	facts->ranges_rows = 0;
	for (int i = 0; i < nslots; i++)
	{
		const DpwinChunkSlot *s = &slots[i];
		char	   *list;
		char	   *item;
		char	   *save;

		if (s->result != DPWIN_CHUNK_VERIFIED || !s->facts_known)
			return false;
		/* the chunks follow one another: the days and bounds come in order */
		Assert(i == 0 || s->lo >= slots[i - 1].hi);
		facts->ranges_rows += s->window_rows;
		if (s->window_rows > 0)
		{
			if (min == NULL)
				min = s->window_min;
			max = s->window_max;
		}
		list = pstrdup(s->window_days);
		for (item = strtok_r(list, ",", &save); item != NULL;
			 item = strtok_r(NULL, ",", &save))
		{
			char	   *colon = strchr(item, ':');

			if (colon == NULL)
				elog(ERROR, "unexpected day \"%s\" in the facts of chunk %d",
					 item, s->chunk_no);
			*colon = '\0';
			if (day != NULL && strcmp(day, item) == 0)
			{
				day_rows += pg_strtoint64(colon + 1);
				continue;
			}
			if (day != NULL)
				appendStringInfo(&rows, "%s" INT64_FORMAT, ndays > 1 ? "," : "", day_rows);
			day = item;
			day_rows = pg_strtoint64(colon + 1);
			if (ndays++ > 0)
				appendStringInfoChar(&days, ',');
			escape_json(&days, day);
		}
	}
	if (day != NULL)
		appendStringInfo(&rows, "%s" INT64_FORMAT, ndays > 1 ? "," : "", day_rows);

	/* as the server's toJSONString() writes them (chprobe.c) */
	facts->days = psprintf("{\"days\":[%s],\"rows\":[%s]}", days.data, rows.data);
	initStringInfo(&bounds);
	appendStringInfoString(&bounds, "{\"min\":");
	json_string_or_null(&bounds, min);
	appendStringInfoString(&bounds, ",\"max\":");
	json_string_or_null(&bounds, max);
	appendStringInfo(&bounds, ",\"window_rows\":" INT64_FORMAT ",\"null_window_rows\":" INT64_FORMAT "}",
					 facts->ranges_rows, null_window_rows);
	facts->bounds = bounds.data;
	return true;
}
