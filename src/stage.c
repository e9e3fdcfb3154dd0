/*-------------------------------------------------------------------------
 *
 * stage.c
 *	  The coordinator's steps before the generation (docs/design.md, "The
 *	  state machine"):
 *
 *	  planned     admit the target under the lease      -> extracting
 *	  extracting  one snapshot, the chunk workers        -> staged
 *	  staged      every receipt verified                 -> verified
 *
 *	  Recovery that finds an invocation planned or extracting cannot go on:
 *	  its snapshot died with its coordinator.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/dsm.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "admission.h"
#include "bgworker.h"
#include "coordinator.h"
#include "progress.h"
#include "source.h"
#include "window.h"

/*
 * Target admission, inside a transaction of its own: type parity consults
 * the system caches.  The result lives in the coordinator's context.
 */
DpwinTargetInfo *
coordinator_admit_target(Coordinator *c)
{
	DpwinTargetInfo *info;

	StartTransactionCommand();
	MemoryContextSwitchTo(c->cxt);
	info = dpwin_target_admit(c->client, c->route);
	CommitTransactionCommand();
	MemoryContextSwitchTo(c->cxt);
	return info;
}

DpwinState
step_admit(Coordinator *c)
{
	if (c->recovering)
		coordinator_expire_snapshot(c);

	c->target = coordinator_admit_target(c);
	c->schema_fingerprint = c->target->schema_fingerprint;
	dpwin_target_probe_exchange(c->client, c->route->target_database);
	dpwin_xact_begin("dpwin: admitted the target");
	dpwin_registry_set_schema(&c->id, c->epoch, c->target->schema_fingerprint);
	dpwin_registry_transition(&c->id, DPWIN_STATE_EXTRACTING, c->epoch, NULL, NULL);
	dpwin_xact_commit(c->cxt);
	c->state = DPWIN_STATE_EXTRACTING;
	return DPWIN_STATE_EXTRACTING;
}

/* The shared segment of the chunk workers: the queue and their results. */
static dsm_segment *
extract_segment(Coordinator *c)
{
	StringInfoData types;
	dsm_segment *seg;
	DpwinExtractShared *sh;
	Size		size;
	ListCell   *lc;

	initStringInfo(&types);
	for (int i = 0; i < c->target->ncolumns; i++)
		appendStringInfo(&types, "%s\n", c->target->column_types[i]);

	c->nchunks = list_length(c->chunks);
	size = dpwin_extract_size(c->nchunks, types.data);
	seg = dsm_create(size, 0);
	sh = dsm_segment_address(seg);
	memset(sh, 0, size);
	sh->magic = DPWIN_EXTRACT_MAGIC;
	sh->database_id = MyDatabaseId;
	sh->user_id = GetUserId();
	sh->login_user_id = GetAuthenticatedUserId();
	sh->route_id = c->route->route_id;
	sh->target_id = c->target_id;
	sh->lease_epoch = c->epoch;
	sh->invocation_id = c->id;
	sh->progress_slot = c->progress_slot;
	sh->retry_backoff_ms = dpwin_retry_backoff_ms;
	sh->key = c->key;
	pg_atomic_init_u32(&sh->next_chunk, 0);
	pg_atomic_init_u32(&sh->stop, 0);
	SpinLockInit(&sh->mutex);
	sh->nchunks = c->nchunks;
	sh->types_offset = offsetof(DpwinExtractShared, chunks) +
		sizeof(DpwinChunkSlot) * c->nchunks;
	memcpy(dpwin_extract_types(sh), types.data, types.len + 1);
	foreach(lc, c->chunks)
	{
		DpwinChunkBounds *b = lfirst(lc);
		DpwinChunkSlot *s = &sh->chunks[foreach_current_index(lc)];

		s->chunk_no = b->chunk_no;
		s->lo = b->lo;
		s->hi = b->hi;
	}
	return seg;
}

Size
dpwin_extract_size(int nchunks, const char *types)
{
	return offsetof(DpwinExtractShared, chunks) +
		sizeof(DpwinChunkSlot) * nchunks + strlen(types) + 1;
}

/* Launch the chunk workers; ereports when not one slot is free. */
static int
launch_workers(Coordinator *c, dsm_segment *seg, BackgroundWorkerHandle **handles,
			   int nworkers)
{
	for (int i = 0; i < nworkers; i++)
	{
		handles[i] = dpwin_bgworker_launch("dpwin_worker_main",
										   psprintf("dpwin chunk worker %d of %s",
													i, dpwin_uuid_text(&c->id)),
										   "dpwin chunk worker",
										   UInt32GetDatum(dsm_segment_handle(seg)));
		if (handles[i] == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("could not start dpwin chunk worker %d of %d", i + 1, nworkers),
					 errdetail("No background worker slot was free."),
					 errhint("Raise max_worker_processes, or lower the route's parallelism or dpwin.max_workers.")));
	}
	return nworkers;
}

/* Take the workers' results; ereports the first permanent failure. */
static void
collect_receipts(Coordinator *c, DpwinExtractShared *sh, dsm_segment *seg)
{
	c->slots = palloc(sizeof(DpwinChunkSlot) * c->nchunks);
	memcpy(c->slots, sh->chunks, sizeof(DpwinChunkSlot) * c->nchunks);

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

	coordinator_tally_receipts(c);
}

/*
 * Read every chunk under one exported snapshot with the route's
 * parallelism, in the given mode.  When `overlap` is set it runs while
 * the workers read the source.  Fills c->slots; ereports the first
 * permanent failure.
 */
void
coordinator_extract_chunks(Coordinator *c, DpwinExtractMode mode,
						   void (*overlap) (Coordinator *c))
{
	dsm_segment *seg;
	DpwinExtractShared *sh;
	BackgroundWorkerHandle **handles;
	int			nworkers;
	TimestampTz started = GetCurrentTimestamp();

	seg = extract_segment(c);
	sh = dsm_segment_address(seg);
	sh->mode = mode;
	if (mode == DPWIN_EXTRACT_SKIP_UNCHANGED)
		for (int i = 0; i < c->nchunks; i++)
			sh->chunks[i].target_digest = c->slots[i].target_digest;
	nworkers = Min(Min(c->route->parallelism, dpwin_max_workers), c->nchunks);
	handles = palloc0(sizeof(BackgroundWorkerHandle *) * nworkers);

	/* ONE snapshot for the whole window, held open until every chunk is in. */
	c->snapshot_name = MemoryContextStrdup(c->cxt, dpwin_snapshot_export());
	strlcpy(sh->snapshot_name, c->snapshot_name, sizeof(sh->snapshot_name));

	PG_TRY();
	{
		launch_workers(c, seg, handles, nworkers);
		if (overlap != NULL)
			overlap(c);
		dpwin_bgworker_wait_all(handles, nworkers);
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

	/* Every worker has stopped: the snapshot has served its purpose. */
	dpwin_snapshot_close();
	MemoryContextSwitchTo(c->cxt);
	c->extract_seconds = coordinator_seconds_since(started);
	collect_receipts(c, sh, seg);
}

/*
 * A refresh that skips unchanged chunks compares each chunk with the
 * target's rows of [lo, hi), all chunks in one statement, and records the
 * target's parts: the generation is cloned once the chunks are known, and
 * the skipped chunks' rows are kept from that clone only if the target's
 * parts are still the same (else they are digested again in the clone).
 */
static List *
prepare_skipping(Coordinator *c)
{
	DpwinDigest *target = palloc(sizeof(DpwinDigest) * list_length(c->chunks));

	c->nchunks = list_length(c->chunks);
	c->slots = palloc0(sizeof(DpwinChunkSlot) * c->nchunks);
	dpwin_target_chunk_digests(c->client, c->target, c->route->target_table,
							   c->route->window_column, c->chunks, &c->key, target);
	for (int i = 0; i < c->nchunks; i++)
		c->slots[i].target_digest = target[i];
	return dpwin_generation_target_parts(c->client, c->target);
}

/*
 * Clone the target while the workers read the source.  This is only a
 * head start: when it fails (a lost connection, a restarted server) the
 * workers go on, and step_build clones again once they are done.  A
 * subtransaction of the snapshot's transaction contains the error; a
 * cancellation is not contained.
 */
static void
overlap_clone(Coordinator *c)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;

	BeginInternalSubTransaction(NULL);
	/* what the clone learns outlives the snapshot's transaction */
	MemoryContextSwitchTo(c->cxt);
	PG_TRY();
	{
		coordinator_prepare_generation(c, coordinator_window_ranges(c));
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(c->cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED || QueryCancelPending ||
			ProcDiePending)
			ReThrowError(edata);
		ereport(LOG,
				(errmsg("dpwin: invocation %s clones its target after extraction: %s",
						dpwin_uuid_text(&c->id), edata->message)));
		c->gen = NULL;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
}

DpwinState
step_extract(Coordinator *c)
{
	if (c->recovering)
		coordinator_expire_snapshot(c);

	if (c->route->skip_unchanged)
	{
		List	   *parts = prepare_skipping(c);

		coordinator_extract_chunks(c, DPWIN_EXTRACT_SKIP_UNCHANGED, NULL);
		coordinator_prepare_generation(c, coordinator_staged_ranges(c));
		if (c->skipped_chunks > 0 &&
			!dpwin_generation_parts_equal(parts, c->gen->target_parts))
			coordinator_check_skipped_rows(c);
	}
	else
		coordinator_extract_chunks(c, DPWIN_EXTRACT_STAGE, overlap_clone);

	dpwin_xact_begin("dpwin: every chunk is staged");
	dpwin_registry_set_snapshot(&c->id, c->epoch, c->snapshot_name);
	dpwin_registry_transition(&c->id, DPWIN_STATE_STAGED, c->epoch, NULL, NULL);
	dpwin_xact_commit(c->cxt);
	c->state = DPWIN_STATE_STAGED;
	return DPWIN_STATE_STAGED;
}

/*
 * Every chunk was staged and verified under one snapshot that was closed
 * normally: the receipts are consistent, and publishing them needs no
 * snapshot.
 */
void
coordinator_tally_receipts(Coordinator *c)
{
	c->source_digest = (DpwinDigest) DPWIN_DIGEST_INIT;
	c->staged_digest = (DpwinDigest) DPWIN_DIGEST_INIT;
	c->encoded_bytes = 0;
	c->skipped_chunks = 0;
	for (int i = 0; i < c->nchunks; i++)
	{
		DpwinChunkSlot *s = &c->slots[i];

		if (s->result != DPWIN_CHUNK_VERIFIED && s->result != DPWIN_CHUNK_SKIPPED)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("chunk %d of invocation %s was not staged",
							s->chunk_no, dpwin_uuid_text(&c->id)),
					 errdetail("A chunk worker stopped before finishing it.")));
		dpwin_digest_merge(&c->source_digest, &s->digest);
		if (s->result == DPWIN_CHUNK_SKIPPED)
			c->skipped_chunks++;
		else
		{
			dpwin_digest_merge(&c->staged_digest, &s->digest);
			c->encoded_bytes += s->bytes;
		}
	}
	c->source_rows = (int64) c->source_digest.count;
	c->staged_rows = (int64) c->staged_digest.count;
}

DpwinState
step_check_receipts(Coordinator *c)
{
	coordinator_tally_receipts(c);
	return DPWIN_STATE_VERIFIED;
}

/* The immutable plan, as jsonb text. */
char *
coordinator_plan_json(Coordinator *c)
{
	StringInfoData buf;
	ListCell   *lc;
	DpwinRoute *r = c->route;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{");
	coordinator_json_text(&buf, "route", r->route_name, false);
	appendStringInfo(&buf, ", \"route_id\": %d", r->route_id);
	coordinator_json_text(&buf, "interval_end", dpwin_timestamp_utc(c->interval_end), true);
	coordinator_json_text(&buf, "window_lo", dpwin_timestamp_utc(c->lo), true);
	coordinator_json_text(&buf, "window_hi", dpwin_timestamp_utc(c->hi), true);
	appendStringInfo(&buf, ", \"lookback_us\": " INT64_FORMAT ", \"chunk_us\": " INT64_FORMAT,
					 r->lookback_us, r->chunk_us);
	coordinator_json_text(&buf, "source", psprintf("%s.%s", r->source_schema, r->source_table), true);
	coordinator_json_text(&buf, "window_column", r->window_column, true);
	appendStringInfoString(&buf, ", \"columns\": [");
	for (int i = 0; i < r->ncolumns; i++)
	{
		if (i)
			appendStringInfoString(&buf, ", ");
		escape_json(&buf, r->columns[i]);
	}
	appendStringInfoString(&buf, "]");
	coordinator_json_text(&buf, "server", r->server_name, true);
	coordinator_json_text(&buf, "target_database", r->target_database, true);
	coordinator_json_text(&buf, "target_table", r->target_table, true);
	appendStringInfo(&buf, ", \"parallelism\": %d, \"batch_rows\": %d, \"max_encoded_bytes\": " INT64_FORMAT,
					 r->parallelism, r->batch_rows, r->max_encoded_bytes);
	coordinator_json_text(&buf, "config_fingerprint", r->config_fingerprint, true);
	coordinator_json_text(&buf, "digest_key", dpwin_digest_key_to_text(&c->key), true);
	appendStringInfoString(&buf, ", \"chunks\": [");
	foreach(lc, c->chunks)
	{
		DpwinChunkBounds *b = lfirst(lc);

		appendStringInfo(&buf, "%s{\"chunk_no\": %d, ", foreach_current_index(lc) ? ", " : "",
						 b->chunk_no);
		coordinator_json_text(&buf, "lo", dpwin_timestamp_utc(b->lo), false);
		coordinator_json_text(&buf, "hi", dpwin_timestamp_utc(b->hi), true);
		appendStringInfoString(&buf, "}");
	}
	appendStringInfoString(&buf, "]}");
	return buf.data;
}
