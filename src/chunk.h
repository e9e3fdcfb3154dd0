/*-------------------------------------------------------------------------
 *
 * chunk.h
 *	  The chunk journal (dpwin.chunk), which chunk.c owns.
 *
 *	  Callers must be inside a transaction with SPI connected.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_CHUNK_H
#define DPWIN_CHUNK_H

#include "utils/uuid.h"

#include "digest.h"
#include "extract.h"

/*
 * The chunk journal of an invocation, in chunk order, as receipts (a
 * chunk neither verified nor skipped reads as failed).
 */
extern DpwinChunkSlot *dpwin_chunk_load(const pg_uuid_t *id, int *nchunks);

/* Chunk journal (all fenced by epoch). */
extern void dpwin_chunk_begin(const pg_uuid_t *id, int chunk_no, int attempt,
							  const char *staging_table, int32 target_id,
							  int64 epoch);
extern void dpwin_chunk_end(const pg_uuid_t *id, int chunk_no, int attempt,
							const char *state, int64 rows, int64 bytes,
							const DpwinDigest *digest, const char *error,
							int32 target_id, int64 epoch);

#endif							/* DPWIN_CHUNK_H */
