/*-------------------------------------------------------------------------
 *
 * extract.h
 *	  The dynamic shared memory segment through which a coordinator hands an
 *	  extraction to its chunk workers, laid out by extraction.c and read by
 *	  worker.c: the exported snapshot's name, the chunk queue, and one result
 *	  slot per chunk.
 *
 *	  Workers take chunks with an atomic counter, so a slow chunk never
 *	  holds up the others; they write only their own chunk's slot, and the
 *	  coordinator reads the slots after every worker has stopped.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_EXTRACT_H
#define DPWIN_EXTRACT_H

#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/dsm.h"
#include "storage/spin.h"
#include "utils/uuid.h"

#include "digest.h"

#define DPWIN_EXTRACT_MAGIC		0x44505745

/*
 * Room for a chunk's window facts: a window value as text, and the rows
 * of each UTC day of a chunk of up to sixteen days.  A chunk of more days
 * falls back to reading the facts from the generation.
 */
#define DPWIN_FACT_VALUE_LEN	64
#define DPWIN_FACT_MAX_DAYS		16

typedef enum DpwinChunkResult
{
	DPWIN_CHUNK_PENDING = 0,
	DPWIN_CHUNK_RUNNING,
	DPWIN_CHUNK_VERIFIED,		/* staged and verified, or digested */
	DPWIN_CHUNK_SKIPPED,		/* its digest equals the target's: not staged */
	DPWIN_CHUNK_FAILED
} DpwinChunkResult;

/* What the chunk workers do with each chunk. */
typedef enum DpwinExtractMode
{
	DPWIN_EXTRACT_STAGE,		/* stage every chunk */
	DPWIN_EXTRACT_SKIP_UNCHANGED,	/* stage the chunks whose digest differs */
	DPWIN_EXTRACT_DIGEST		/* digest only: no staging, no journal */
} DpwinExtractMode;

/*
 * The window's facts among a chunk's rows (facts.h): its rows inside the
 * window, its lowest and highest window value, and its rows of each UTC
 * day.  known is false where they did not fit here.
 */
typedef struct DpwinChunkFacts
{
	bool		known;
	int64		window_rows;
	char		window_min[DPWIN_FACT_VALUE_LEN];	/* "" when no row */
	char		window_max[DPWIN_FACT_VALUE_LEN];
	int64		first_day;		/* its first UTC day, in days from 2000-01-01 */
	int			ndays;
	int64		day_rows[DPWIN_FACT_MAX_DAYS];
} DpwinChunkFacts;

typedef struct DpwinChunkSlot
{
	int			chunk_no;
	TimestampTz lo;
	TimestampTz hi;
	DpwinChunkResult result;
	int			attempts;		/* attempts made */
	uint64		rows;
	uint64		bytes;
	DpwinDigest digest;
	double		seconds;		/* wall time of the verified attempt */
	/* SKIP_UNCHANGED: the target's rows of [lo, hi) */
	DpwinDigest target_digest;
	char		staging_table[NAMEDATALEN * 2];

	/* the window's facts among the staged rows, read with their digest */
	DpwinChunkFacts facts;
} DpwinChunkSlot;

typedef struct DpwinExtractShared
{
	uint32		magic;
	Oid			database_id;
	Oid			user_id;		/* runs as this role ... */
	Oid			login_user_id;	/* ... after connecting as this one */
	int32		route_id;
	int32		target_id;
	int64		lease_epoch;
	pg_uuid_t	invocation_id;
	int			progress_slot;
	int			retry_backoff_ms;
	DpwinExtractMode mode;
	DpwinDigestKey key;
	TimestampTz window_lo;		/* the window, of which the chunks are part */
	TimestampTz window_hi;
	char		snapshot_name[64];

	pg_atomic_uint32 next_chunk;	/* the chunk queue */
	pg_atomic_uint32 stop;		/* set on the first permanent failure */
	pg_atomic_uint32 finished;	/* workers done with the queue */
	struct PGPROC *coordinator; /* whose latch a finished worker sets */

	slock_t		mutex;			/* protects the error fields */
	int			error_code;
	char		error_message[1024];
	char		error_detail[1024];

	Size		types_offset;	/* target column types, '\n'-separated */
	int			nchunks;
	DpwinChunkSlot chunks[FLEXIBLE_ARRAY_MEMBER];
} DpwinExtractShared;


/* The target column types stored after the chunk slots. */
static inline char *
dpwin_extract_types(DpwinExtractShared *sh)
{
	return ((char *) sh) + sh->types_offset;
}

#endif							/* DPWIN_EXTRACT_H */
