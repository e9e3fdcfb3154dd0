/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The chunk worker: takes chunks from the coordinator's queue, reads
 *	  each one under the exported snapshot, encodes its rows as RowBinary
 *	  while digesting them, streams them into an attempt-owned staging
 *	  table, has ClickHouse digest the staging table, and journals a
 *	  verified receipt fenced by the lease epoch.  The digest runs on a
 *	  second connection while the worker loads its next chunk, so that a
 *	  worker's statements in sequence are its CREATEs and INSERTs.
 *
 *	  A transient failure (connection, timeout, 5xx, digest mismatch) is
 *	  retried at most DPWIN_MAX_RETRIES times with backoff.  Before a retry
 *	  the failed attempt is fenced: its last statement is settled on the
 *	  server (a dropped connection does not stop a running INSERT), its
 *	  staging table dropped, and its journal row marked fenced.  Schema,
 *	  fidelity and identity errors are not retried; they stop the whole
 *	  extraction.
 *
 *	  A worker never publishes.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "bgworker.h"
#include "chclient.h"
#include "chunk.h"
#include "extract.h"
#include "facts.h"
#include "fdw.h"
#include "names.h"
#include "progress.h"
#include "registry.h"
#include "route.h"
#include "rowbinary.h"
#include "source.h"
#include "target.h"
#include "window.h"
#include "worker.h"

/*
 * The most encoded rows a worker holds before it hands them to the
 * chunk's INSERT (or the route's max_encoded_bytes, when smaller): small
 * enough that ClickHouse parses a piece while the worker encodes the
 * next (docs/design.md, "Extraction").
 */
#define WORKER_PIECE_BYTES	(1024 * 1024)

/*
 * A chunk an attempt loaded into its staging table: what its verification
 * needs, kept outside the per-attempt memory.
 */
typedef struct StagedChunk
{
	DpwinChunkSlot *slot;
	int			attempt;
	char		staging[NAMEDATALEN * 2];
	DpwinDigest local;			/* the source's digest of its rows */
	uint64		rows;
	uint64		bytes;
	TimestampTz started;
} StagedChunk;

/* What one worker needs for all its chunks. */
typedef struct WorkerState
{
	DpwinExtractShared *sh;
	DpwinRoute *route;
	ChClient   *client;
	ChClient   *verifier;		/* the staging digests: a connection of their
								 * own, so that one runs while the next chunk
								 * loads */
	RbEncoder  *encoder;
	DpwinTargetInfo target;		/* database, table and columns only */
	char	   *insert_prefix;	/* "INSERT INTO " */
	char	   *insert_suffix;	/* " (cols) FORMAT RowBinary" */
	MemoryContext chunk_cxt;	/* reset for every attempt */
	MemoryContext batch_cxt;	/* reset for every batch of rows */

	/*
	 * The request body being encoded.  It lives as long as the worker, so
	 * that it grows to its working size once, not again for every chunk.
	 */
	StringInfoData body;

	/* per attempt */
	char	   *last_query_id;	/* may need settling after a failure */
	bool		inserting;		/* the chunk's INSERT is open on client */
	DpwinFailure failure;		/* the worker's own verdict on its failure */
	StagedChunk loaded;			/* what the last attempt loaded */

	/*
	 * The chunk whose digest the verifier computes while the worker loads
	 * the next one (docs/design.md, "Extraction").
	 */
	bool		has_pending;
	StagedChunk pending;
} WorkerState;

/* Streams a byte range of the encode buffer as a request body. */
typedef struct BufferReader
{
	const char *data;
	size_t		len;
	size_t		off;
} BufferReader;

static size_t
buffer_reader(void *arg, char *buf, size_t max, bool *failed)
{
	BufferReader *r = arg;
	size_t		n = Min(max, r->len - r->off);

	memcpy(buf, r->data + r->off, n);
	r->off += n;
	return n;
}

/* Record the first permanent failure for the coordinator and stop the queue. */
static void
worker_record_failure(DpwinExtractShared *sh, ErrorData *edata)
{
	SpinLockAcquire(&sh->mutex);
	if (sh->error_code == 0)
	{
		sh->error_code = edata->sqlerrcode;
		strlcpy(sh->error_message, edata->message ? edata->message : "unknown error",
				sizeof(sh->error_message));
		strlcpy(sh->error_detail, edata->detail ? edata->detail : "",
				sizeof(sh->error_detail));
	}
	SpinLockRelease(&sh->mutex);
	pg_atomic_write_u32(&sh->stop, 1);
}

/* Raise the failure of a chunk's INSERT, if it failed. */
static void
worker_insert_check(ChHttpStatus status, const ChHttpReply *reply, int chunk_no)
{
	if (status != CHHTTP_OK)
		dpwin_ch_report(status, reply, psprintf("inserting rows of chunk %d", chunk_no));
}

/*
 * Wait for the chunk's streamed INSERT and raise its failure, if any: an
 * answer that came before the body ended (cut_short) is one.
 */
static void
worker_insert_finish(WorkerState *ws, int chunk_no, bool cut_short)
{
	ChHttpReply reply;
	ChHttpStatus status;

	ws->inserting = false;
	status = dpwin_ch_finish_status(ws->client, &reply);
	worker_insert_check(status, &reply, chunk_no);
	if (cut_short)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("ClickHouse answered the INSERT of chunk %d before its rows were sent",
						chunk_no)));
}

/*
 * Send encoded rows into the staging table.  A chunk's rows all go in one
 * INSERT (one part on the server, one statement), whose body is handed
 * over piece by piece as the rows are encoded; a chunk whose rows fit in
 * one piece is sent as a whole.  last ends the chunk.
 */
static void
worker_send(WorkerState *ws, const char *staging, const char *data, size_t len,
			int chunk_no, bool last)
{
	if (ws->has_pending)
		dpwin_ch_poll(ws->verifier);
	if (!ws->inserting)
	{
		char	   *sql = psprintf("%s%s%s", ws->insert_prefix,
								   dpwin_ch_qualified_name(ws->route->target_database,
														   staging),
								   ws->insert_suffix);

		ws->last_query_id = dpwin_ch_next_query_id(ws->client, "ins");
		if (last)
		{
			BufferReader reader = {data, len, 0};
			ChHttpReply reply;
			ChHttpStatus status;

			status = dpwin_ch_try(ws->client, sql, ws->last_query_id,
								  buffer_reader, &reader, &reply);
			worker_insert_check(status, &reply, chunk_no);
			return;
		}
		dpwin_ch_start_fed(ws->client, sql, ws->last_query_id);
		ws->inserting = true;
	}
	if (len > 0 && !dpwin_ch_feed(ws->client, data, len))
		worker_insert_finish(ws, chunk_no, true);
	if (last)
	{
		(void) dpwin_ch_feed(ws->client, NULL, 0);
		worker_insert_finish(ws, chunk_no, false);
	}
}

/*
 * Receives one chunk's rows from the executor (dpwin_source_read()): each
 * row is encoded from the scan's slot, digested, and appended to the
 * piece of the chunk's INSERT body in hand, which is sent whenever it
 * outgrows its bound (worker_send()).
 */
typedef struct ChunkReceiver
{
	DestReceiver pub;			/* must be first */
	WorkerState *ws;
	DpwinChunkSlot *slot;
	const char *staging;		/* NULL: digest only */
	DpwinDigest *digest;
	StringInfo	buf;			/* the worker's request body */
	uint64		rows;
	uint64		bytes;
	int			in_batch;		/* rows since the last batch boundary */
	int64		piece;			/* most bytes encoded before they are sent */
} ChunkReceiver;

/*
 * Every batch_rows rows: count them in the progress slot, free what their
 * encoding allocated, and stop if another chunk failed.
 */
static void
chunk_batch_boundary(ChunkReceiver *r)
{
	WorkerState *ws = r->ws;

	if (ws->has_pending)
		dpwin_ch_poll(ws->verifier);
	if (r->in_batch > 0)
	{
		MemoryContextReset(ws->batch_cxt);
		dpwin_progress_add(ws->sh->progress_slot, 0, r->in_batch, 0);
		r->in_batch = 0;
	}
	CHECK_FOR_INTERRUPTS();
	if (pg_atomic_read_u32(&ws->sh->stop))
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("extraction stopped after a failure in another chunk")));
}

static bool
chunk_receive_slot(TupleTableSlot *tslot, DestReceiver *self)
{
	ChunkReceiver *r = (ChunkReceiver *) self;
	WorkerState *ws = r->ws;
	DpwinRoute *route = ws->route;
	StringInfo	buf = r->buf;
	int			row_start = buf->len;
	size_t		row_len;
	MemoryContext oldcxt;

	slot_getallattrs(tslot);
	oldcxt = MemoryContextSwitchTo(ws->batch_cxt);
	dpwin_rb_encode_row(ws->encoder, tslot->tts_values, tslot->tts_isnull, buf);
	row_len = buf->len - row_start;
	if (row_len > (size_t) route->max_encoded_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a row of chunk %d encodes to %zu bytes, more than max_encoded_bytes (%lld)",
						r->slot->chunk_no, row_len,
						(long long) route->max_encoded_bytes),
				 errdetail("Row with %s = %s.", route->window_column,
						   tslot->tts_isnull[route->window_index] ? "NULL" :
						   dpwin_timestamp_utc(DatumGetTimestampTz(tslot->tts_values[route->window_index]))),
				 errhint("Raise the route's max_encoded_bytes with dpwin.alter_route().")));
	dpwin_digest_add_row(r->digest, &ws->sh->key, buf->data + row_start, row_len);
	r->rows++;
	r->bytes += row_len;
	MemoryContextSwitchTo(oldcxt);

	if (r->staging == NULL)
		resetStringInfo(buf);
	/* Hand the rows over in pieces of at most r->piece bytes. */
	else if (buf->len > r->piece)
	{
		oldcxt = MemoryContextSwitchTo(ws->chunk_cxt);
		worker_send(ws, r->staging, buf->data, row_start, r->slot->chunk_no, false);
		memmove(buf->data, buf->data + row_start, row_len);
		buf->len = row_len;
		buf->data[buf->len] = '\0';
		MemoryContextSwitchTo(oldcxt);
	}

	if (++r->in_batch >= route->batch_rows)
		chunk_batch_boundary(r);
	return true;
}

static void
chunk_receive_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
chunk_receive_nothing(DestReceiver *self)
{
}

/*
 * Read chunk `slot` under the exported snapshot, encode its rows and
 * digest them into *digest; with a staging table, stream them into it in
 * one INSERT.
 */
static void
worker_read_chunk(WorkerState *ws, DpwinChunkSlot *slot, const char *staging,
				  DpwinDigest *digest, uint64 *rows, uint64 *bytes)
{
	ChunkReceiver r;

	memset(&r, 0, sizeof(r));
	r.pub.receiveSlot = chunk_receive_slot;
	r.pub.rStartup = chunk_receive_startup;
	r.pub.rShutdown = chunk_receive_nothing;
	r.pub.rDestroy = chunk_receive_nothing;
	r.pub.mydest = DestNone;
	r.ws = ws;
	r.slot = slot;
	r.staging = staging;
	r.digest = digest;
	r.buf = &ws->body;
	r.piece = Min(ws->route->max_encoded_bytes, WORKER_PIECE_BYTES);
	resetStringInfo(r.buf);
	MemoryContextSwitchTo(ws->chunk_cxt);

	chunk_batch_boundary(&r);
	dpwin_source_read(ws->route, ws->sh->snapshot_name, slot->lo, slot->hi,
					  &r.pub);
	MemoryContextSwitchTo(ws->chunk_cxt);
	chunk_batch_boundary(&r);
	if (staging != NULL && (r.buf->len > 0 || ws->inserting))
		worker_send(ws, staging, r.buf->data, r.buf->len, slot->chunk_no, true);
	*rows += r.rows;
	*bytes += r.bytes;
}

/*
 * After a failed load: is the copy still the target as admitted?  Raises
 * the check's error when it is not (final, as when the check preceded the
 * rows) and a cancellation as it is; returns when the copy matches or when
 * the check itself cannot run, so that the load's own error stands.
 */
static void
worker_check_after_failure(WorkerState *ws, const char *staging)
{
	PG_TRY();
	{
		dpwin_target_check_like(ws->client, &ws->target, staging);
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		int			code;

		MemoryContextSwitchTo(ws->chunk_cxt);
		edata = CopyErrorData();
		code = edata->sqlerrcode;
		FreeErrorData(edata);
		if (code == ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE)
			ws->failure = DPWIN_FAILURE_FINAL;
		if (code == ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE ||
			code == ERRCODE_QUERY_CANCELED)
			PG_RE_THROW();
		FlushErrorState();
	}
	PG_END_TRY();
}

/*
 * worker_read_chunk() into a staging table created without its check
 * (dpwin_target_create_unchecked()).  If reading or loading fails, the
 * check runs then, before the error is raised: a copy that differs from
 * the target fails the attempt with the check's error, as it did when the
 * check came first.  A cancellation is raised as it is, and so is the
 * original error when the check cannot run.
 */
static void
worker_read_checked(WorkerState *ws, DpwinChunkSlot *slot, const char *staging,
					DpwinDigest *digest, uint64 *rows, uint64 *bytes)
{
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		worker_read_chunk(ws, slot, staging, digest, rows, bytes);
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		DpwinFailure failure = ws->client->last_failure;

		MemoryContextSwitchTo(ws->chunk_cxt);
		edata = CopyErrorData();
		FlushErrorState();
		/* a body cut short is never completed: the server fails the INSERT */
		if (ws->inserting)
			dpwin_ch_abandon(ws->client);
		ws->inserting = false;
		if (edata->sqlerrcode != ERRCODE_QUERY_CANCELED &&
			!QueryCancelPending && !ProcDiePending)
			worker_check_after_failure(ws, staging);
		/* the retry decision reads the failed statement's verdict */
		ws->client->last_failure = failure;
		MemoryContextSwitchTo(cxt);
		ReThrowError(edata);
	}
	PG_END_TRY();
}

/*
 * One attempt at one chunk: journal it, create its staging table and load
 * the chunk's rows into it, digesting them as they go (ws->loaded).
 * ereports on any failure; worker_verdict() tells whether a retry may help.
 */
static void
worker_attempt(WorkerState *ws, DpwinChunkSlot *slot, int attempt)
{
	DpwinExtractShared *sh = ws->sh;
	StagedChunk *c = &ws->loaded;
	char	   *staging;

	memset(c, 0, sizeof(StagedChunk));
	c->slot = slot;
	c->attempt = attempt;
	c->started = GetCurrentTimestamp();
	staging = dpwin_staging_name(sh->route_id, &sh->invocation_id,
								 slot->chunk_no, attempt);
	strlcpy(c->staging, staging, sizeof(c->staging));
	ws->last_query_id = NULL;

	/* Verdicts on earlier work are not this attempt's. */
	ws->failure = DPWIN_FAILURE_NONE;
	ws->client->last_failure = DPWIN_FAILURE_NONE;
	ws->verifier->last_failure = DPWIN_FAILURE_NONE;

	/* Journal the attempt before it writes anything to ClickHouse. */
	dpwin_xact_begin("dpwin: chunk attempt");
	dpwin_chunk_begin(&sh->invocation_id, slot->chunk_no, attempt, staging,
					  sh->target_id, sh->lease_epoch);
	dpwin_xact_commit(ws->chunk_cxt);

	/*
	 * The name is new: it carries the invocation, the chunk and the attempt,
	 * and no attempt runs twice, so there is nothing to drop before the
	 * CREATE (a failed attempt's table is dropped by its fence, a lost
	 * process's by recovery).
	 *
	 * That the copy is the target as admitted is checked once for every
	 * copy, by the coordinator before it attaches their parts (one read of
	 * the catalog instead of one a chunk); an attempt that fails to load
	 * checks it on its own, so that a changed target fails it with the
	 * check's error rather than the load's.
	 */
	dpwin_target_create_unchecked(ws->client, &ws->target, staging);
	worker_read_checked(ws, slot, staging, &c->local, &c->rows, &c->bytes);
}

/*
 * Ask the verifier for a staging table's digest, and in the same read for
 * the window's facts among its rows (facts.h).
 */
static void
worker_digest_start(WorkerState *ws, const DpwinChunkSlot *slot, const char *staging)
{
	dpwin_target_digest_like_start(ws->verifier, &ws->target, staging, &ws->sh->key,
								   dpwin_facts_chunk_sql(&ws->target, ws->route->window_column, slot,
														 ws->sh->window_lo, ws->sh->window_hi));
}

/*
 * Verify a loaded chunk whose digest the verifier was asked for
 * (dpwin_target_digest_like_start()): ClickHouse's digest of the staging
 * table must equal the source's.  Then journal the receipt, fenced by the
 * epoch.  ereports on any failure, as worker_attempt() does.
 */
static void
worker_verify(WorkerState *ws, const StagedChunk *c)
{
	DpwinExtractShared *sh = ws->sh;
	DpwinChunkSlot *slot = c->slot;
	DpwinDigest remote;
	List	   *facts;

	facts = dpwin_target_digest_like_finish(ws->verifier, &ws->target, c->staging,
											DPWIN_FACTS_CHUNK_COLUMNS, &remote);
	if (!dpwin_digest_equal(&c->local, &remote))
	{
		/*
		 * a copy that does not verify is made again (docs/design.md,
		 * "Failures")
		 */
		ws->failure = DPWIN_FAILURE_TRANSIENT;
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("staging table %s of chunk %d does not match the source",
						c->staging, slot->chunk_no),
				 errdetail("Source digest %s, staging digest %s.",
						   dpwin_digest_to_text(&c->local),
						   dpwin_digest_to_text(&remote))));
	}

	/* kept in the slot, which the coordinator reads once it is verified */
	dpwin_facts_chunk_store(slot, sh->window_lo, sh->window_hi, facts);

	dpwin_xact_begin("dpwin: chunk receipt");
	dpwin_chunk_end(&sh->invocation_id, slot->chunk_no, c->attempt, "verified",
					(int64) c->rows, (int64) c->bytes, &c->local, NULL,
					sh->target_id, sh->lease_epoch);
	dpwin_xact_commit(ws->chunk_cxt);

	slot->rows = c->rows;
	slot->bytes = c->bytes;
	slot->digest = c->local;
	slot->seconds = (double) (GetCurrentTimestamp() - c->started) / USECS_PER_SEC;
	strlcpy(slot->staging_table, c->staging, sizeof(slot->staging_table));
	slot->result = DPWIN_CHUNK_VERIFIED;
	dpwin_progress_add(sh->progress_slot, 1, 0, c->bytes);
}

/*
 * Digest a chunk without staging it.  In DIGEST mode that is all (nothing
 * is journaled: a verification owns no invocation); in SKIP_UNCHANGED mode
 * a chunk whose digest equals the target's is journaled as skipped, and
 * true is returned; otherwise false, and the chunk is staged as usual.
 */
static bool
worker_digest_pass(WorkerState *ws, DpwinChunkSlot *slot)
{
	DpwinExtractShared *sh = ws->sh;
	DpwinDigest local = DPWIN_DIGEST_INIT;
	uint64		rows = 0;
	uint64		bytes = 0;
	TimestampTz started = GetCurrentTimestamp();

	MemoryContextSwitchTo(ws->chunk_cxt);
	worker_read_chunk(ws, slot, NULL, &local, &rows, &bytes);
	slot->rows = rows;
	slot->bytes = bytes;
	slot->digest = local;
	slot->seconds = (double) (GetCurrentTimestamp() - started) / USECS_PER_SEC;
	if (sh->mode == DPWIN_EXTRACT_DIGEST)
	{
		slot->result = DPWIN_CHUNK_VERIFIED;
		dpwin_progress_add(sh->progress_slot, 1, 0, 0);
		return true;
	}
	if (!dpwin_digest_equal(&local, &slot->target_digest))
		return false;

	dpwin_xact_begin("dpwin: chunk skipped");
	dpwin_chunk_begin(&sh->invocation_id, slot->chunk_no, 0, NULL,
					  sh->target_id, sh->lease_epoch);
	dpwin_chunk_end(&sh->invocation_id, slot->chunk_no, 0, "skipped",
					(int64) rows, (int64) bytes, &local, NULL,
					sh->target_id, sh->lease_epoch);
	dpwin_xact_commit(ws->chunk_cxt);
	slot->result = DPWIN_CHUNK_SKIPPED;
	dpwin_progress_add(sh->progress_slot, 1, 0, 0);
	return true;
}

/* Journal a failed or fenced attempt; errors here are reported, not raised. */
static void
worker_journal_attempt_end(WorkerState *ws, DpwinChunkSlot *slot, int attempt,
						   const char *state, const char *message)
{
	DpwinExtractShared *sh = ws->sh;

	PG_TRY();
	{
		dpwin_xact_begin("dpwin: chunk attempt failed");
		dpwin_chunk_end(&sh->invocation_id, slot->chunk_no, attempt, state,
						0, 0, NULL, message, sh->target_id, sh->lease_epoch);
		dpwin_xact_commit(ws->chunk_cxt);
	}
	PG_CATCH();
	{
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
}

/* Wait for the backoff before try number attempt + 1. */
static void
worker_backoff(WorkerState *ws, int attempt)
{
	dpwin_sleep_ms((long) ws->sh->retry_backoff_ms << attempt);
}

/*
 * Settle the last statement of a failed attempt on the server, then drop
 * its staging table.  Returns false, with the error's SQLSTATE in
 * *sqlerrcode, if either fails.
 */
static bool
worker_fence_once(WorkerState *ws, DpwinChunkSlot *slot, int attempt,
				  int *sqlerrcode)
{
	volatile bool ok = true;

	PG_TRY();
	{
		MemoryContextSwitchTo(ws->chunk_cxt);
		if (ws->last_query_id)
			dpwin_ch_settle_query(ws->client, ws->last_query_id);
		dpwin_target_drop_table(ws->client, ws->route->target_database,
								dpwin_staging_name(ws->sh->route_id,
												   &ws->sh->invocation_id,
												   slot->chunk_no, attempt));
	}
	PG_CATCH();
	{
		*sqlerrcode = geterrcode();
		EmitErrorReport();
		FlushErrorState();
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

/*
 * Fence a failed attempt before the next one.  A server that cannot be
 * reached meanwhile (it is restarting, or the network is down) is given
 * the same schedule as the attempts themselves: the fence is tried again
 * after each backoff, up to DPWIN_MAX_RETRIES times more, so that an
 * outage longer than one settling deadline does not end the refresh.
 * Returns false if the fence cannot be completed, in which case the chunk
 * cannot be retried safely.
 */
static bool
worker_fence_attempt(WorkerState *ws, DpwinChunkSlot *slot, int attempt)
{
	for (int try = 0;; try++)
	{
		int			sqlerrcode = 0;

		if (worker_fence_once(ws, slot, attempt, &sqlerrcode))
			return true;
		if (try >= DPWIN_MAX_RETRIES || sqlerrcode == ERRCODE_QUERY_CANCELED ||
			ws->client->last_failure != DPWIN_FAILURE_TRANSIENT ||
			pg_atomic_read_u32(&ws->sh->stop))
			return false;
		ereport(LOG,
				(errmsg("dpwin: could not fence attempt %d of chunk %d, trying again in %ld ms",
						attempt, slot->chunk_no,
						(long) ws->sh->retry_backoff_ms << try)));
		worker_backoff(ws, try);
	}
}

/*
 * Run the digest pass (attempt < 0; *settled says whether it settled the
 * chunk) or one attempt at staging it: with defer, only its load (its
 * verification is the caller's), else its load and its verification.
 * NULL when it succeeded, else its error.
 */
static ErrorData *
worker_try(WorkerState *ws, DpwinChunkSlot *slot, int attempt, bool defer,
		   bool *settled)
{
	ErrorData  *volatile edata = NULL;

	MemoryContextReset(ws->chunk_cxt);
	PG_TRY();
	{
		if (attempt < 0)
			*settled = worker_digest_pass(ws, slot);
		else
		{
			worker_attempt(ws, slot, attempt);
			if (!defer)
			{
				worker_digest_start(ws, slot, ws->loaded.staging);
				worker_verify(ws, &ws->loaded);
			}
		}
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(ws->chunk_cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		/* a verification of this attempt's own ends with it */
		if (!defer)
			dpwin_ch_abandon(ws->verifier);
	}
	PG_END_TRY();
	return edata;
}

/*
 * Is a failed attempt worth another?  The verdict was recorded where the
 * failure became known: by the worker for a staging table that does not
 * verify (transient), else by a client for a request that failed, on
 * any statement of the attempt (a lost connection or a server error the
 * server calls transient may pass; a refusal for lack of rights, a
 * cancelled request does not).  Every failed request of an attempt
 * raises at once, so a verdict of a client is that of the error that
 * ended the attempt.  Anything else (a value the target cannot hold, a
 * row that is too large, a cancellation, an answer that cannot be read)
 * fails again: final.
 */
static DpwinFailure
worker_verdict(WorkerState *ws)
{
	if (ws->failure != DPWIN_FAILURE_NONE)
		return ws->failure;
	if (ws->client->last_failure != DPWIN_FAILURE_NONE)
		return ws->client->last_failure;
	if (ws->verifier->last_failure != DPWIN_FAILURE_NONE)
		return ws->verifier->last_failure;
	return DPWIN_FAILURE_FINAL;
}

/*
 * Attempt `attempt` of a chunk failed with edata.  Returns true when
 * another attempt may follow, the failed one fenced and journaled and the
 * backoff waited; else journals the failure, records it for the
 * coordinator and returns false.
 */
static bool
worker_failed(WorkerState *ws, DpwinChunkSlot *slot, int attempt,
			  ErrorData *edata)
{
	bool		retry;
	long		backoff_ms = (long) ws->sh->retry_backoff_ms << attempt;

	MemoryContextSwitchTo(ws->chunk_cxt);
	retry = worker_verdict(ws) == DPWIN_FAILURE_TRANSIENT &&
		attempt < DPWIN_MAX_RETRIES && !pg_atomic_read_u32(&ws->sh->stop);
	/* The log names the backoff, so that it can be checked without a clock. */
	ereport(LOG,
			(errmsg("dpwin: attempt %d of chunk %d failed%s: %s",
					attempt, slot->chunk_no,
					retry ? psprintf(", retrying in %ld ms", backoff_ms) : "",
					edata->message),
			 edata->detail ? errdetail("%s", edata->detail) : 0));
	if (retry)
		retry = worker_fence_attempt(ws, slot, attempt);
	worker_journal_attempt_end(ws, slot, attempt,
							   retry ? "fenced" : "failed",
							   edata->message);
	if (!retry)
	{
		slot->result = DPWIN_CHUNK_FAILED;
		if (edata->sqlerrcode != ERRCODE_QUERY_CANCELED ||
			!pg_atomic_read_u32(&ws->sh->stop))
			worker_record_failure(ws->sh, edata);
		return false;
	}
	dpwin_sleep_ms(backoff_ms);
	return true;
}

/*
 * Attempts at staging a chunk, from `attempt` on, until one succeeds
 * (true) or the chunk fails (false).  With defer, the attempt that
 * succeeds has only loaded the chunk (ws->loaded): verifying it is the
 * caller's.
 */
static bool
worker_stage(WorkerState *ws, DpwinChunkSlot *slot, int attempt, bool defer)
{
	for (;; attempt++)
	{
		ErrorData  *edata;

		slot->attempts = attempt + 1;
		edata = worker_try(ws, slot, attempt, defer, NULL);
		if (edata == NULL)
			return true;
		if (!worker_failed(ws, slot, attempt, edata))
			return false;
	}
}

/*
 * Verify the chunk whose digest the verifier has been computing, if any.
 * A chunk that does not verify is fenced and staged again like any failed
 * attempt, this time verified at once.
 */
static void
worker_complete_pending(WorkerState *ws)
{
	StagedChunk c;
	ErrorData  *volatile edata = NULL;

	if (!ws->has_pending)
		return;
	c = ws->pending;
	ws->has_pending = false;

	MemoryContextReset(ws->chunk_cxt);
	ws->failure = DPWIN_FAILURE_NONE;
	ws->client->last_failure = DPWIN_FAILURE_NONE;
	ws->verifier->last_failure = DPWIN_FAILURE_NONE;
	PG_TRY();
	{
		worker_verify(ws, &c);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(ws->chunk_cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		dpwin_ch_abandon(ws->verifier);
	}
	PG_END_TRY();
	if (edata == NULL)
		return;

	/* Its INSERTs were answered: no statement of it runs on the server. */
	ws->last_query_id = NULL;
	if (worker_failed(ws, c.slot, c.attempt, edata))
		(void) worker_stage(ws, c.slot, c.attempt + 1, false);
}

/*
 * Stage one chunk.  Its digest is left to the verifier while the worker
 * loads its next chunk: an attempt that loads it verifies the one before
 * it (whose digest ClickHouse computed meanwhile), then starts its own
 * digest.  The last one is verified when the queue is empty.
 */
static void
worker_chunk(WorkerState *ws, DpwinChunkSlot *slot)
{
	StagedChunk loaded;

	slot->result = DPWIN_CHUNK_RUNNING;
	if (ws->sh->mode != DPWIN_EXTRACT_STAGE)
	{
		bool		settled = false;
		ErrorData  *edata = worker_try(ws, slot, -1, true, &settled);

		if (edata != NULL)
		{
			slot->result = DPWIN_CHUNK_FAILED;
			if (edata->sqlerrcode != ERRCODE_QUERY_CANCELED ||
				!pg_atomic_read_u32(&ws->sh->stop))
				worker_record_failure(ws->sh, edata);
			return;
		}
		if (settled)
			return;
	}
	if (!worker_stage(ws, slot, 0, true))
		return;

	/* a retry of the chunk before may load again: keep what this one loaded */
	loaded = ws->loaded;
	worker_complete_pending(ws);
	worker_digest_start(ws, loaded.slot, loaded.staging);
	ws->pending = loaded;
	ws->has_pending = true;
}

/*
 * Everything a worker needs for all its chunks: its route, the target's
 * column types as admission found them, the encoder and a ClickHouse
 * client, read in a transaction of their own.
 */
static void
worker_setup(WorkerState *ws, MemoryContext worker_cxt)
{
	DpwinExtractShared *sh = ws->sh;
	DpwinServerConf *conf;
	char	   *types;
	char	   *tok;
	char	   *save;
	StringInfoData cols;

	dpwin_xact_begin("dpwin: chunk worker setup");
	MemoryContextSwitchTo(worker_cxt);
	initStringInfo(&ws->body);
	ws->route = dpwin_route_load_by_id(sh->route_id);
	conf = dpwin_server_conf(ws->route->server_name, GetUserId());

	/* The target's column types, as admission found them. */
	ws->target.database = ws->route->target_database;
	ws->target.table = ws->route->target_table;
	ws->target.ncolumns = ws->route->ncolumns;
	ws->target.column_names = ws->route->columns;
	ws->target.column_types = palloc(sizeof(char *) * ws->route->ncolumns);
	types = pstrdup(dpwin_extract_types(sh));
	tok = strtok_r(types, "\n", &save);
	for (int i = 0; i < ws->route->ncolumns; i++)
	{
		if (tok == NULL)
			elog(ERROR, "dpwin: target column types missing from shared memory");
		ws->target.column_types[i] = tok;
		tok = strtok_r(NULL, "\n", &save);
	}
	initStringInfo(&cols);
	for (int i = 0; i < ws->route->ncolumns; i++)
		appendStringInfo(&cols, "%s%s", i ? ", " : "",
						 dpwin_ch_quote_ident(ws->route->columns[i]));
	ws->target.quoted_columns = cols.data;
	ws->insert_prefix = "INSERT INTO ";
	ws->insert_suffix = psprintf(" (%s) FORMAT RowBinary", cols.data);

	ws->encoder = dpwin_rb_encoder_create(ws->route->ncolumns, ws->route->columns,
										  ws->route->column_types,
										  ws->route->column_typmods,
										  ws->route->column_notnull,
										  ws->target.column_types,
										  ws->route->window_index);
	ws->client = dpwin_ch_client_open(conf, psprintf("dpwin-%s-w%d-",
													 dpwin_uuid_text(&sh->invocation_id),
													 MyProcPid));
	ws->verifier = dpwin_ch_client_open(conf, psprintf("dpwin-%s-w%d-v-",
													   dpwin_uuid_text(&sh->invocation_id),
													   MyProcPid));
	dpwin_xact_commit(worker_cxt);
}

void
dpwin_worker_main(Datum main_arg)
{
	dsm_segment *seg;
	DpwinExtractShared *sh;
	WorkerState ws = {0};
	MemoryContext worker_cxt;

	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	seg = dsm_attach(DatumGetUInt32(main_arg));
	if (seg == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dpwin chunk worker could not attach to its coordinator's shared memory")));
	sh = dsm_segment_address(seg);
	if (sh->magic != DPWIN_EXTRACT_MAGIC)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dpwin chunk worker found bad magic in shared memory")));
	ws.sh = sh;

	dpwin_bgworker_connect(sh->database_id, sh->login_user_id, sh->user_id);
	pgstat_report_appname("dpwin chunk worker");

	/*
	 * A chunk receipt is what recovery trusts to publish staged chunks
	 * without a snapshot: it must not be lost by a crash after its commit,
	 * whatever synchronous_commit the server runs with.
	 */
	if (synchronous_commit == SYNCHRONOUS_COMMIT_OFF)
		SetConfigOption("synchronous_commit", "local", PGC_USERSET, PGC_S_OVERRIDE);

	worker_cxt = AllocSetContextCreate(TopMemoryContext, "dpwin worker",
									   ALLOCSET_DEFAULT_SIZES);
	ws.chunk_cxt = AllocSetContextCreate(worker_cxt, "dpwin chunk",
										 ALLOCSET_DEFAULT_SIZES);
	ws.batch_cxt = AllocSetContextCreate(worker_cxt, "dpwin batch",
										 ALLOCSET_DEFAULT_SIZES);

	/* A failure to set up is reported to the coordinator like any other. */
	PG_TRY();
	{
		worker_setup(&ws, worker_cxt);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(worker_cxt);
		edata = CopyErrorData();
		worker_record_failure(sh, edata);
		PG_RE_THROW();
	}
	PG_END_TRY();

	for (;;)
	{
		uint32		idx;

		CHECK_FOR_INTERRUPTS();
		if (pg_atomic_read_u32(&sh->stop))
			break;
		idx = pg_atomic_fetch_add_u32(&sh->next_chunk, 1);
		if (idx >= (uint32) sh->nchunks)
			break;

		/*
		 * A refresh that skips unchanged chunks takes the newest first: the
		 * newest rows are the ones most likely to have changed, and a
		 * changed chunk found early is staged while the older ones are
		 * compared, not after them (docs/design.md, "Skipping unchanged
		 * chunks").
		 */
		if (sh->mode == DPWIN_EXTRACT_SKIP_UNCHANGED)
			idx = (uint32) sh->nchunks - 1 - idx;
		worker_chunk(&ws, &sh->chunks[idx]);
	}
	worker_complete_pending(&ws);

	/*
	 * Every receipt of this worker is committed and its slots are written:
	 * the coordinator may go on while this process exits.
	 */
	pg_atomic_add_fetch_u32(&sh->finished, 1);
	SetLatch(&sh->coordinator->procLatch);

	dpwin_ch_client_close(ws.verifier);
	dpwin_ch_client_close(ws.client);
	dsm_detach(seg);
	proc_exit(0);
}
