/*-------------------------------------------------------------------------
 *
 * window.c
 *	  Window arithmetic: duration validation, the half-open chunk partition
 *	  of [interval_end - lookback, interval_end), and the SQL functions
 *	  dpwin.plan() and dpwin.plan_window().
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

#include "route.h"
#include "window.h"

/*
 * Text of an interval for error messages.  interval_out follows
 * IntervalStyle, which is what the user typed the value in anyway.
 */
static char *
interval_text(const Interval *iv)
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
						what, interval_text(iv)),
				 errdetail("Calendar months and years have no fixed length."),
				 errhint("Use days, hours, minutes and seconds; a day is 24 hours.")));

	/* days are 24 hours: the window is fixed-length in UTC */
	if (pg_mul_s64_overflow((int64) iv->day, USECS_PER_DAY, &usecs) ||
		pg_add_s64_overflow(usecs, iv->time, &usecs))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s \"%s\" is out of range", what, interval_text(iv))));

	if (usecs <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s \"%s\" is not positive", what, interval_text(iv)),
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
	 * Chunk i is [lo + i*chunk, min(lo + (i+1)*chunk, end)).  i*chunk is
	 * less than lookback, so lo + i*chunk stays inside the window; only
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

/* Emit a chunk list as the (chunk_no, lo, hi) rows of a set-returning call. */
static void
emit_chunks(FunctionCallInfo fcinfo, List *chunks)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);

	foreach(lc, chunks)
	{
		DpwinChunkBounds *c = lfirst(lc);
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		values[0] = Int32GetDatum(c->chunk_no);
		values[1] = TimestampTzGetDatum(c->lo);
		values[2] = TimestampTzGetDatum(c->hi);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

static void
require_interval_end(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("interval_end must not be NULL"),
				 errdetail("dpwin has no wall-clock fallback: the window is always given by the caller."),
				 errhint("Pass the end of the data interval as a timestamptz, e.g. '2026-09-09T00:00:00Z'.")));
}

/*
 * dpwin.plan(route text, interval_end timestamptz)
 *		RETURNS TABLE(chunk_no int, lo timestamptz, hi timestamptz)
 *
 * The chunks a refresh of the route would read at interval_end.  No I/O.
 * Not STRICT, so that a NULL interval_end is an error and not an empty set.
 */
PG_FUNCTION_INFO_V1(dpwin_plan);

Datum
dpwin_plan(PG_FUNCTION_ARGS)
{
	DpwinRoute *route;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("route name must not be NULL")));
	require_interval_end(fcinfo, 1);

	route = dpwin_route_load(text_to_cstring(PG_GETARG_TEXT_PP(0)), false);
	emit_chunks(fcinfo, dpwin_window_chunks(PG_GETARG_TIMESTAMPTZ(1),
											route->lookback_us,
											route->chunk_us));
	return (Datum) 0;
}

/*
 * dpwin.plan(route text, interval_end timestamp without time zone)
 *
 * Exists only to refuse: a timestamp without time zone would otherwise be
 * cast to timestamptz in the session's TimeZone, and the window would move
 * with the client's settings.  Same for a date.
 */
PG_FUNCTION_INFO_V1(dpwin_plan_naive);

Datum
dpwin_plan_naive(PG_FUNCTION_ARGS)
{
	Oid			argtype = get_fn_expr_argtype(fcinfo->flinfo, 1);

	ereport(ERROR,
			(errcode(ERRCODE_DATATYPE_MISMATCH),
			 errmsg("interval_end must be timestamp with time zone, not %s",
					argtype == DATEOID ? "date" : "timestamp without time zone"),
			 errdetail("A value without a time zone would be read in the session's TimeZone."),
			 errhint("Pass an aware value such as '2026-09-09T00:00:00Z' or cast with ::timestamptz.")));
	PG_RETURN_NULL();
}

/*
 * dpwin.plan_window(interval_end timestamptz, lookback interval,
 *					 chunk_interval interval)
 *
 * The same partition without a route.
 */
PG_FUNCTION_INFO_V1(dpwin_plan_window);

Datum
dpwin_plan_window(PG_FUNCTION_ARGS)
{
	int64		lookback_us;
	int64		chunk_us;

	require_interval_end(fcinfo, 0);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lookback must not be NULL")));
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("chunk_interval must not be NULL")));

	lookback_us = dpwin_duration_usecs(PG_GETARG_INTERVAL_P(1), "lookback");
	chunk_us = dpwin_duration_usecs(PG_GETARG_INTERVAL_P(2), "chunk_interval");
	if (chunk_us > lookback_us)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("chunk_interval \"%s\" is longer than lookback \"%s\"",
						interval_text(PG_GETARG_INTERVAL_P(2)),
						interval_text(PG_GETARG_INTERVAL_P(1)))));

	emit_chunks(fcinfo, dpwin_window_chunks(PG_GETARG_TIMESTAMPTZ(0),
											lookback_us, chunk_us));
	return (Datum) 0;
}
