/*-------------------------------------------------------------------------
 *
 * facts.h
 *	  The window's facts for the evidence (facts.c): the rows of each UTC day, the
 *	  bounds, the rows inside the window), read by each chunk's staging
 *	  digest, or from the target for the chunks a refresh keeps, and added
 *	  up once every chunk is staged.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_FACTS_H
#define DPWIN_FACTS_H

#include "chprobe.h"
#include "extract.h"
#include "target.h"

/* The columns dpwin_facts_chunk_sql() adds to a staging digest. */
#define DPWIN_FACTS_CHUNK_COLUMNS	4

/*
 * The select items that read, beside a staging table's digest and over
 * the same rows, the facts of the window [lo, hi) among the rows of the
 * slot's chunk.
 */
extern char *dpwin_facts_chunk_sql(const DpwinTargetInfo *target,
								   const char *window_column,
								   const DpwinChunkSlot *slot,
								   TimestampTz lo, TimestampTz hi);

/* Keep the values of those columns in the chunk's slot. */
extern void dpwin_facts_chunk_store(DpwinChunkSlot *slot, TimestampTz lo,
									TimestampTz hi, List *values);

/*
 * The window's facts among the target's rows of each chunk (a List of
 * DpwinChunkBounds: a window's chunks, as dpwin_window_chunks() makes
 * them), and its rows whose window value is NULL, in one statement: for a
 * refresh that keeps the chunks it skips from the target.  An array of
 * one per chunk; NULL when the chunks are not one width end to end.
 */
extern DpwinChunkFacts *dpwin_facts_read_target(ChClient *client,
												const DpwinTargetInfo *target,
												const char *window_column,
												List *chunks,
												TimestampTz lo, TimestampTz hi,
												int64 *null_window_rows);

/*
 * The window's facts from the slots of every chunk of the window, in
 * order, each staged and verified or (with kept, the target's facts of
 * each chunk) skipped, and the rows of the generation whose window value
 * is NULL (all of them kept rows): facts->days, bounds and ranges_rows
 * (the staged rows inside the window); rows is left to the caller.  False
 * when a chunk's facts are not known.
 */
extern bool dpwin_facts_from_chunks(const DpwinChunkSlot *slots, int nslots,
									const DpwinChunkFacts *kept,
									int64 null_window_rows,
									DpwinWindowFacts *facts);

#endif							/* DPWIN_FACTS_H */
