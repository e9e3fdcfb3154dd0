/*-------------------------------------------------------------------------
 *
 * window.h
 *	  Window arithmetic (window.c): duration validation and the half-open chunk
 *	  partition of [interval_end - lookback, interval_end).
 *
 *	  Pure functions: no catalog access, no I/O.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_WINDOW_H
#define DPWIN_WINDOW_H

#include "datatype/timestamp.h"
#include "utils/timestamp.h"
#include "nodes/pg_list.h"

typedef struct DpwinChunkBounds
{
	int			chunk_no;		/* 0-based */
	TimestampTz lo;				/* inclusive */
	TimestampTz hi;				/* exclusive */
} DpwinChunkBounds;

/*
 * Most chunks one window may have.  Every chunk is a journal row, a staging
 * table in ClickHouse and at least one request, so a window cut finer than
 * this is a configuration mistake; create_route refuses it up front.
 */
#define DPWIN_MAX_CHUNKS		10000

/*
 * Validate a lookback or chunk interval: positive, no month/year part, days
 * counted as 24 hours.  Returns the duration in microseconds; ereports
 * (ERRCODE_INVALID_PARAMETER_VALUE) naming `what` and the value otherwise.
 */
extern int64 dpwin_duration_usecs(const Interval *iv, const char *what);

/* Number of chunks of a window: ceil(lookback_us / chunk_us). */
extern int64 dpwin_window_nchunks(int64 lookback_us, int64 chunk_us);

/*
 * Partition [interval_end - lookback_us, interval_end) into chunks of
 * chunk_us (the last one shorter when lookback is not a multiple).  Returns
 * a List of palloc'd DpwinChunkBounds.  ereports on overflow or a window
 * outside the timestamp range or more than DPWIN_MAX_CHUNKS chunks.
 */
extern List *dpwin_window_chunks(TimestampTz interval_end, int64 lookback_us,
								 int64 chunk_us);

/* Text of an interval for messages, as the user typed it (IntervalStyle). */
extern char *dpwin_interval_text(const Interval *iv);

/* Microseconds from the Unix epoch (ClickHouse's) to PostgreSQL's. */
#define DPWIN_UNIX_TO_PG_USECS \
	((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY)

/*
 * A finite window bound as microseconds since the Unix epoch; ereports
 * (ERRCODE_DATETIME_VALUE_OUT_OF_RANGE) naming `what` otherwise.
 */
extern int64 dpwin_unix_usecs(TimestampTz ts, const char *what);

/* ISO-8601 UTC text of a timestamp, independent of TimeZone/DateStyle. */
extern char *dpwin_timestamp_utc(TimestampTz ts);

#endif							/* DPWIN_WINDOW_H */
