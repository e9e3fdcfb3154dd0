/*-------------------------------------------------------------------------
 *
 * progress.h
 *	  Progress of running invocations in shared memory (progress.c), read by
 *	  the dpwin.progress view in the manner of pg_stat_progress_*.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_PROGRESS_H
#define DPWIN_PROGRESS_H

#include "port/atomics.h"
#include "utils/uuid.h"

typedef struct DpwinProgressSlot
{
	bool		in_use;			/* protected by the tranche's LWLock */
	pg_uuid_t	invocation_id;
	int32		route_id;
	int			coordinator_pid;
	char		phase[NAMEDATALEN]; /* written by the coordinator only */
	int			chunks_total;
	pg_atomic_uint32 chunks_done;
	pg_atomic_uint64 rows;
	pg_atomic_uint64 bytes;
	TimestampTz started_at;
} DpwinProgressSlot;

/*
 * Request the shared memory for nslots slots, dpwin.max_invocations (from
 * _PG_init, while shared_preload_libraries loads).
 */
extern void dpwin_progress_init(int nslots);

/*
 * Claim a slot for an invocation (ereports when all dpwin.max_invocations
 * slots are busy); released at process exit or by dpwin_progress_release.
 */
extern int	dpwin_progress_claim(const pg_uuid_t *invocation_id, int32 route_id,
								 int chunks_total);
extern void dpwin_progress_release(int slot);
extern void dpwin_progress_phase(int slot, const char *phase);
extern void dpwin_progress_add(int slot, uint32 chunks, uint64 rows, uint64 bytes);

#endif							/* DPWIN_PROGRESS_H */
