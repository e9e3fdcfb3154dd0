/*-------------------------------------------------------------------------
 *
 * extraction.h
 *	  Reading a window's chunks under one exported snapshot with chunk
 *	  workers (extraction.c; docs/design.md, "Extraction"): the shared segment, the
 *	  workers, their receipts and the tally of them, and target admission
 *	  in a transaction of its own.  Used by the refresh's steps and by
 *	  dpwin.verify(); knows nothing of the state machine.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_EXTRACTION_H
#define DPWIN_EXTRACTION_H

#include "nodes/pg_list.h"
#include "utils/timestamp.h"

#include "admission.h"
#include "chclient.h"
#include "extract.h"
#include "route.h"

/* What an extraction read, chunk by chunk and in total. */
typedef struct DpwinExtraction
{
	List	   *chunks;			/* DpwinChunkBounds, as planned */
	DpwinDigestKey key;
	DpwinChunkSlot *slots;		/* the chunks' receipts */
	int			nchunks;
	char	   *snapshot_name;
	DpwinDigest source_digest;	/* every chunk */
	DpwinDigest staged_digest;	/* the chunks staged (not skipped) */
	int			skipped_chunks;
	int64		source_rows;
	int64		staged_rows;
	int64		encoded_bytes;
	/*
	 * SKIP_UNCHANGED: the window's facts among the target's rows of each
	 * chunk, for the chunks kept from it, and the target's rows whose
	 * window value is NULL; NULL when not known.
	 */
	DpwinChunkFacts *kept_facts;
	int64		kept_null_rows;
} DpwinExtraction;

/* Who extracts: what the chunk workers need to know besides the chunks. */
typedef struct DpwinExtractJob
{
	pg_uuid_t	invocation_id;
	const DpwinRoute *route;
	const DpwinTargetInfo *target;
	int32		target_id;
	int64		epoch;
	int			progress_slot;
	TimestampTz window_lo;		/* the window the chunks are part of */
	TimestampTz window_hi;
	MemoryContext cxt;			/* where the receipts live */
} DpwinExtractJob;

/*
 * Target admission inside a transaction of its own (type parity consults
 * the system caches); the result lives in `cxt`.  A refusal is raised, or,
 * when `refusal` is given, returned there (NULL when admitted).
 */
extern DpwinTargetInfo *dpwin_extraction_admit(ChClient *client,
											   const DpwinRoute *route,
											   MemoryContext cxt,
											   DpwinRefusal **refusal);

/*
 * Read every chunk of x->chunks under one exported snapshot with the
 * route's parallelism, in the given mode; `overlap(arg)`, when set, runs
 * while the workers read the source.  Fills and tallies x->slots and
 * returns the seconds it took; ereports the first permanent failure.
 */
extern double dpwin_extraction_run(DpwinExtraction *x, const DpwinExtractJob *job,
								   DpwinExtractMode mode,
								   void (*overlap) (void *arg), void *arg);

/*
 * Sum the receipts into the totals.  `complete`: every chunk must be
 * verified or skipped (ereports otherwise); else failed chunks are left
 * out, as in a journal read back by recovery.
 */
extern void dpwin_extraction_tally(DpwinExtraction *x, const pg_uuid_t *id,
								   bool complete);

static inline double
dpwin_seconds_since(TimestampTz start)
{
	return (double) (GetCurrentTimestamp() - start) / USECS_PER_SEC;
}

#endif							/* DPWIN_EXTRACTION_H */
