/*-------------------------------------------------------------------------
 *
 * extraction.c
 *	  Reading a window's chunks under one exported snapshot (docs/design.md,
 *	  "Extraction"): the coordinator exports the snapshot, fills the shared
 *	  segment of extract.h, launches the chunk workers (worker.c), waits
 *	  for them, and tallies their receipts.
 *
 *	  Takes narrow arguments (DpwinExtraction, DpwinExtractJob): the steps
 *	  of a refresh and dpwin.verify() call it alike, and it calls neither.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/dsm.h"
#include "storage/proc.h"
#include "utils/memutils.h"

#include "bgworker.h"
#include "extraction.h"
#include "registry.h"
#include "source.h"
#include "window.h"

DpwinTargetInfo *
dpwin_extraction_admit(ChClient *client, const DpwinRoute *route,
					   MemoryContext cxt, DpwinRefusal **refusal)
{
	DpwinTargetInfo *info;

	StartTransactionCommand();
	MemoryContextSwitchTo(cxt);
	if (refusal != NULL)
		info = dpwin_admission_try_admit(client, route, refusal);
	else
		info = dpwin_admission_admit(client, route);
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	return info;
}

static Size
extract_size(int nchunks, const char *types)
{
	return offsetof(DpwinExtractShared, chunks) +
		sizeof(DpwinChunkSlot) * nchunks + strlen(types) + 1;
}

/* The shared segment of the chunk workers: the queue and their results. */
static dsm_segment *
extract_segment(DpwinExtraction *x, const DpwinExtractJob *job)
{
	StringInfoData types;
	dsm_segment *seg;
	DpwinExtractShared *sh;
	Size		size;
	ListCell   *lc;

	initStringInfo(&types);
	for (int i = 0; i < job->target->ncolumns; i++)
		appendStringInfo(&types, "%s\n", job->target->column_types[i]);

	x->nchunks = list_length(x->chunks);
	size = extract_size(x->nchunks, types.data);
	seg = dsm_create(size, 0);
	sh = dsm_segment_address(seg);
	memset(sh, 0, size);
	sh->magic = DPWIN_EXTRACT_MAGIC;
	sh->database_id = MyDatabaseId;
	sh->user_id = GetUserId();
	sh->login_user_id = GetAuthenticatedUserId();
	sh->route_id = job->route->route_id;
	sh->target_id = job->target_id;
	sh->lease_epoch = job->epoch;
	sh->invocation_id = job->invocation_id;
	sh->progress_slot = job->progress_slot;
	sh->retry_backoff_ms = dpwin_retry_backoff_ms;
	sh->key = x->key;
	sh->window_lo = job->window_lo;
	sh->window_hi = job->window_hi;
	pg_atomic_init_u32(&sh->next_chunk, 0);
	pg_atomic_init_u32(&sh->stop, 0);
	pg_atomic_init_u32(&sh->finished, 0);
	sh->coordinator = MyProc;
	SpinLockInit(&sh->mutex);
	sh->nchunks = x->nchunks;
	sh->types_offset = offsetof(DpwinExtractShared, chunks) +
		sizeof(DpwinChunkSlot) * x->nchunks;
	memcpy(dpwin_extract_types(sh), types.data, types.len + 1);
	foreach(lc, x->chunks)
	{
		DpwinChunkBounds *b = lfirst(lc);
		DpwinChunkSlot *s = &sh->chunks[foreach_current_index(lc)];

		s->chunk_no = b->chunk_no;
		s->lo = b->lo;
		s->hi = b->hi;
	}
	return seg;
}

/* Launch the chunk workers; ereports when not one slot is free. */
static void
launch_workers(const DpwinExtractJob *job, dsm_segment *seg,
			   BackgroundWorkerHandle **handles, int nworkers)
{
	for (int i = 0; i < nworkers; i++)
	{
		handles[i] = dpwin_bgworker_launch("dpwin_worker_main",
										   psprintf("dpwin chunk worker %d of %s",
													i, dpwin_uuid_text(&job->invocation_id)),
										   "dpwin chunk worker",
										   UInt32GetDatum(dsm_segment_handle(seg)));
		if (handles[i] == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("could not start dpwin chunk worker %d of %d", i + 1, nworkers),
					 errdetail("No background worker slot was free."),
					 errhint("Raise max_worker_processes, or lower the route's parallelism or dpwin.max_workers.")));
	}
}

/* Take the workers' results; ereports the first permanent failure. */
static void
collect_receipts(DpwinExtraction *x, DpwinExtractShared *sh, dsm_segment *seg)
{
	x->slots = palloc(sizeof(DpwinChunkSlot) * x->nchunks);
	memcpy(x->slots, sh->chunks, sizeof(DpwinChunkSlot) * x->nchunks);

	if (sh->error_code != 0)
	{
		char	   *message = pstrdup(sh->error_message);
		char	   *detail = pstrdup(sh->error_detail);
		int			code = sh->error_code;

		dsm_detach(seg);
		ereport(ERROR,
				(errcode(code),
				 errmsg("%s", message),
				 detail[0] ? errdetail("%s", detail) : 0));
	}
	dsm_detach(seg);
}

double
dpwin_extraction_run(DpwinExtraction *x, const DpwinExtractJob *job,
					 DpwinExtractMode mode, void (*overlap) (void *arg), void *arg)
{
	dsm_segment *seg;
	DpwinExtractShared *sh;
	BackgroundWorkerHandle **handles;
	int			nworkers;
	TimestampTz started = GetCurrentTimestamp();
	double		seconds;

	seg = extract_segment(x, job);
	sh = dsm_segment_address(seg);
	sh->mode = mode;
	if (mode == DPWIN_EXTRACT_SKIP_UNCHANGED)
		for (int i = 0; i < x->nchunks; i++)
			sh->chunks[i].target_digest = x->slots[i].target_digest;
	nworkers = Min(Min(job->route->parallelism, dpwin_max_workers), x->nchunks);
	handles = palloc0(sizeof(BackgroundWorkerHandle *) * nworkers);

	/* ONE snapshot for the whole window, held open until every chunk is in. */
	x->snapshot_name = MemoryContextStrdup(job->cxt, dpwin_snapshot_export());
	strlcpy(sh->snapshot_name, x->snapshot_name, sizeof(sh->snapshot_name));

	PG_TRY();
	{
		launch_workers(job, seg, handles, nworkers);
		if (overlap != NULL)
			overlap(arg);
		dpwin_bgworker_wait_all(handles, nworkers, &sh->finished);
	}
	PG_CATCH();
	{
		pg_atomic_write_u32(&sh->stop, 1);
		HOLD_INTERRUPTS();
		dpwin_bgworker_stop_all(handles, nworkers);
		RESUME_INTERRUPTS();
		PG_RE_THROW();
	}
	PG_END_TRY();

	/*
	 * Every worker is done with the queue (some may still be exiting): the
	 * snapshot has served its purpose.
	 */
	dpwin_snapshot_close();
	MemoryContextSwitchTo(job->cxt);
	seconds = dpwin_seconds_since(started);
	collect_receipts(x, sh, seg);
	dpwin_extraction_tally(x, &job->invocation_id, true);
	return seconds;
}

void
dpwin_extraction_tally(DpwinExtraction *x, const pg_uuid_t *id, bool complete)
{
	x->source_digest = (DpwinDigest) DPWIN_DIGEST_INIT;
	x->staged_digest = (DpwinDigest) DPWIN_DIGEST_INIT;
	x->encoded_bytes = 0;
	x->skipped_chunks = 0;
	for (int i = 0; i < x->nchunks; i++)
	{
		DpwinChunkSlot *s = &x->slots[i];

		if (s->result != DPWIN_CHUNK_VERIFIED && s->result != DPWIN_CHUNK_SKIPPED)
		{
			if (!complete)
				continue;

			/*
			 * A worker that died without reporting: 55000, as PostgreSQL
			 * reports a parallel worker it lost.
			 */
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("chunk %d of invocation %s was not staged",
							s->chunk_no, dpwin_uuid_text(id)),
					 errdetail("A chunk worker stopped before finishing it.")));
		}
		dpwin_digest_merge(&x->source_digest, &s->digest);
		if (s->result == DPWIN_CHUNK_SKIPPED)
			x->skipped_chunks++;
		else
		{
			dpwin_digest_merge(&x->staged_digest, &s->digest);
			x->encoded_bytes += s->bytes;
		}
	}
	x->source_rows = (int64) x->source_digest.count;
	x->staged_rows = (int64) x->staged_digest.count;
}
