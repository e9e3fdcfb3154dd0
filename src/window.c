/*-------------------------------------------------------------------------
 *
 * window.c
 *	  Window arithmetic: duration validation and the half-open chunk
 *	  partition of [interval_end - lookback, interval_end).  Pure: no
 *	  catalog, no network (the SQL functions that show it are in plan.c).
 *
 *	  Everything is integer microsecond arithmetic on TimestampTz (which is
 *	  UTC microseconds since 2000-01-01), so the result never depends on the
 *	  session's TimeZone, DateStyle or IntervalStyle.  A day is exactly
 *	  86400 seconds: calendar days in a time zone with daylight saving time
 *	  are not what a fixed lookback means.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "catalog/pg_type.h"
#include "common/int.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "window.h"

/*
 * Text of an interval for error messages.  interval_out follows
 * IntervalStyle, which is what the user typed the value in anyway.
 */
char *
dpwin_interval_text(const Interval *iv)
{
	return DatumGetCString(DirectFunctionCall1(interval_out,
											   IntervalPGetDatum((Interval *) iv)));
}

int64
dpwin_duration_usecs(const Interval *iv, const char *what)
{
	int64		usecs;

	if (iv->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s \"%s\" has a month or year part",
						what, dpwin_interval_text(iv)),
				 errdetail("Calendar months and years have no fixed length."),
				 errhint("Use days, hours, minutes and seconds; a day is 24 hours.")));

	/* days are 24 hours: the window is fixed-length in UTC */
	if (pg_mul_s64_overflow((int64) iv->day, USECS_PER_DAY, &usecs) ||
		pg_add_s64_overflow(usecs, iv->time, &usecs))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s \"%s\" is out of range", what, dpwin_interval_text(iv))));

	if (usecs <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s \"%s\" is not positive", what, dpwin_interval_text(iv)),
				 (iv->day > 0 && iv->time < 0) ?
				 errdetail("A day counts as exactly 24 hours.") : 0));

	return usecs;
}

int64
dpwin_window_nchunks(int64 lookback_us, int64 chunk_us)
{
	Assert(lookback_us > 0 && chunk_us > 0);
	/* ceil(lookback / chunk) without overflow */
	return lookback_us / chunk_us + (lookback_us % chunk_us != 0 ? 1 : 0);
}

List *
dpwin_window_chunks(TimestampTz interval_end, int64 lookback_us,
					int64 chunk_us)
{
	TimestampTz lo;
	int64		nchunks;
	List	   *chunks = NIL;

	if (lookback_us <= 0 || chunk_us <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lookback and chunk interval must be positive")));
	if (chunk_us > lookback_us)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("chunk interval is longer than the lookback")));

	if (TIMESTAMP_NOT_FINITE(interval_end))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("interval_end must be a finite timestamp")));

	if (pg_sub_s64_overflow(interval_end, lookback_us, &lo) ||
		!IS_VALID_TIMESTAMP(lo))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("window start interval_end - lookback is before the earliest timestamp"),
				 errdetail("interval_end is %s.", dpwin_timestamp_utc(interval_end))));

	nchunks = dpwin_window_nchunks(lookback_us, chunk_us);
	if (nchunks > DPWIN_MAX_CHUNKS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("the window would have " INT64_FORMAT " chunks, more than the maximum of %d",
						nchunks, DPWIN_MAX_CHUNKS),
				 errhint("Use a longer chunk interval.")));

	/*
	 * Chunk i is [lo + i*chunk, min(lo + (i+1)*chunk, end)).  i*chunk is less
	 * than lookback, so lo + i*chunk stays inside the window; only
	 * (i+1)*chunk of the last chunk can exceed the int64 range.
	 */
	for (int64 i = 0; i < nchunks; i++)
	{
		DpwinChunkBounds *c = palloc(sizeof(DpwinChunkBounds));
		int64		off_hi;

		c->chunk_no = (int) i;
		c->lo = lo + i * chunk_us;
		if (pg_mul_s64_overflow(i + 1, chunk_us, &off_hi) ||
			off_hi >= lookback_us)
			c->hi = interval_end;
		else
			c->hi = lo + off_hi;
		chunks = lappend(chunks, c);
	}

	return chunks;
}

int64
dpwin_unix_usecs(TimestampTz ts, const char *what)
{
	int64		usecs;

	if (TIMESTAMP_NOT_FINITE(ts) ||
		pg_add_s64_overflow(ts, DPWIN_UNIX_TO_PG_USECS, &usecs))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("%s bound of the window is not a finite timestamp", what)));
	return usecs;
}

char *
dpwin_timestamp_utc(TimestampTz ts)
{
	struct pg_tm tm;
	fsec_t		fsec;
	StringInfoData buf;

	if (TIMESTAMP_IS_NOBEGIN(ts))
		return pstrdup("-infinity");
	if (TIMESTAMP_IS_NOEND(ts))
		return pstrdup("infinity");

	/* no time zone argument: the broken-down time is UTC */
	if (timestamp2tm(ts, NULL, &tm, &fsec, NULL, NULL) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));

	initStringInfo(&buf);
	/* ISO 8601 astronomical years: 1 BC is 0000 */
	if (tm.tm_year < 0)
		appendStringInfo(&buf, "-%04d", -tm.tm_year);
	else
		appendStringInfo(&buf, "%04d", tm.tm_year);
	appendStringInfo(&buf, "-%02d-%02dT%02d:%02d:%02d",
					 tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
	if (fsec != 0)
		appendStringInfo(&buf, ".%06d", (int) fsec);
	appendStringInfoChar(&buf, 'Z');
	return buf.data;
}
