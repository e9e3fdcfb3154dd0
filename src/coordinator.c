/*-------------------------------------------------------------------------
 *
 * coordinator.c
 *	  The refresh state machine: the composition root of dpwin, and the
 *	  only file that knows every capability.
 *
 *	  planned -> extracting -> staged -> verified -> publishing
 *		  -> published -> evidenced -> completed
 *
 *	  1. admit the call (done by the caller, before any I/O);
 *	  2. take the target's lease and bump its fencing epoch;
 *	  3. persist the immutable plan; admit the target under the lease;
 *	  4. export one snapshot, run the chunk workers, close the snapshot;
 *	  5. build the replacement generation and verify it;
 *	  6. persist the publication intent, EXCHANGE, reconcile by UUIDs;
 *	  7. write evidence, advance the route state, clean up.
 *
 *	  Recovery enters the same machine at the state the journal records,
 *	  and never opens a snapshot.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/xact.h"
#include "common/cryptohash.h"
#include "common/sha2.h"
#include "lib/stringinfo.h"
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
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "catalog.h"
#include "chclient.h"
#include "coordinator.h"
#include "digest.h"
#include "extract.h"
#include "lease.h"
#include "names.h"
#include "partition.h"
#include "progress.h"
#include "registry.h"
#include "route.h"
#include "source.h"
#include "admission.h"
#include "target.h"
#include "window.h"

typedef struct Coordinator
{
	DpwinCallShared *call;
	MemoryContext cxt;
	pg_uuid_t	id;

	DpwinRoute *route;
	DpwinServerConf *conf;
	ChClient   *client;
	DpwinTargetInfo *target;
	int32		target_id;
	int64		epoch;
	bool		lease_held;
	DpwinState	state;			/* as last journaled by us */
	bool		registered;		/* the invocation row exists */
	bool		not_published;	/* the exchange is known not to have run */

	TimestampTz interval_end;
	TimestampTz lo;
	TimestampTz hi;
	List	   *chunks;			/* DpwinChunkBounds */
	DpwinDigestKey key;
	int			progress_slot;

	/* extraction */
	DpwinChunkSlot *slots;		/* copy of the workers' results */
	int			nchunks;
	char	   *snapshot_name;

	/* generation */
	char	   *generation;
	char	   *backup;
	DpwinPartitionPlan *partitions; /* cloned/copied partitions (partition.c) */
	DpwinDigest source_digest;
	DpwinDigest keep_digest;
	int64		source_rows;
	int64		staged_rows;
	int64		final_rows;
	int64		encoded_bytes;

	/* phase timings, in seconds; < 0 when unavailable */
	double		extract_seconds;
	double		verify_seconds;
	double		build_seconds;
	double		publish_seconds;
} Coordinator;

static void coordinator_refresh(Coordinator *c);
static void coordinator_record_outcome(Coordinator *c, const char *outcome);
static void coordinator_recover(Coordinator *c);
static void coordinator_abandon(Coordinator *c);

/* ----------------------------------------------------------------
 *		transactions
 * ---------------------------------------------------------------- */

static void
xact_begin(void)
{
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
}

static void
xact_commit(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
}

static double
seconds_since(TimestampTz start)
{
	return (double) (GetCurrentTimestamp() - start) / USECS_PER_SEC;
}

/* Journal a state change in a transaction of its own. */
static void
coordinator_transition(Coordinator *c, DpwinState to, const char *message,
					   const char *sqlstate)
{
	xact_begin();
	dpwin_registry_transition(&c->id, to, c->epoch, message, sqlstate);
	xact_commit();
	MemoryContextSwitchTo(c->cxt);
	c->state = to;
	if (c->progress_slot >= 0)
		dpwin_progress_phase(c->progress_slot, dpwin_state_name(to));
}

/* ----------------------------------------------------------------
 *		caller side
 * ---------------------------------------------------------------- */

static void
caller_cleanup(int code, Datum arg)
{
	BackgroundWorkerHandle *handle = (BackgroundWorkerHandle *) DatumGetPointer(arg);

	/* The coordinator treats this as a cancellation (see its handler). */
	TerminateBackgroundWorker(handle);
}

void
dpwin_run_coordinator(DpwinCallShared *call)
{
	dsm_segment *seg;
	DpwinCallShared *shared;
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	BgwHandleStatus status;
	pid_t		pid;

	seg = dsm_create(sizeof(DpwinCallShared), 0);
	shared = dsm_segment_address(seg);
	memcpy(shared, call, sizeof(DpwinCallShared));
	shared->magic = DPWIN_CALL_MAGIC;
	shared->finished = false;
	shared->sqlerrcode = 0;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "dpwin");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "dpwin_coordinator_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "dpwin coordinator %s",
			 dpwin_uuid_text(&call->invocation_id));
	snprintf(worker.bgw_type, BGW_MAXLEN, "dpwin coordinator");
	worker.bgw_main_arg = UInt32GetDatum(dsm_segment_handle(seg));
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start a dpwin coordinator: no free background worker slot"),
				 errhint("Raise max_worker_processes (each refresh needs one coordinator plus its route's parallelism).")));

	PG_ENSURE_ERROR_CLEANUP(caller_cleanup, PointerGetDatum(handle));
	{
		status = WaitForBackgroundWorkerStartup(handle, &pid);
		if (status == BGWH_POSTMASTER_DIED)
			ereport(ERROR,
					(errcode(ERRCODE_ADMIN_SHUTDOWN),
					 errmsg("postmaster died while starting the dpwin coordinator")));
		for (;;)
		{
			status = GetBackgroundWorkerPid(handle, &pid);
			if (status == BGWH_STOPPED)
				break;
			if (status == BGWH_POSTMASTER_DIED)
				ereport(ERROR,
						(errcode(ERRCODE_ADMIN_SHUTDOWN),
						 errmsg("postmaster died while the dpwin coordinator was running")));
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 1000, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_END_ENSURE_ERROR_CLEANUP(caller_cleanup, PointerGetDatum(handle));

	memcpy(call, shared, sizeof(DpwinCallShared));
	dsm_detach(seg);

	if (!call->finished)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("the dpwin coordinator of invocation %s ended without reporting an outcome",
						dpwin_uuid_text(&call->invocation_id)),
				 errhint("See the server log and dpwin.invocations; SELECT * FROM dpwin.recover('%s') settles what can be settled.",
						 dpwin_uuid_text(&call->invocation_id))));
	if (call->sqlerrcode != 0)
		ereport(ERROR,
				(errcode(call->sqlerrcode),
				 errmsg("%s", call->message),
				 call->detail[0] ? errdetail("%s", call->detail) : 0,
				 call->hint[0] ? errhint("%s", call->hint) : 0));
}

/* ----------------------------------------------------------------
 *		coordinator process
 * ---------------------------------------------------------------- */

/*
 * SIGTERM (the caller was cancelled or terminated, or the server shuts
 * down) cancels the invocation: it surfaces as a query-cancel error at the
 * next CHECK_FOR_INTERRUPTS, which the main loop journals.  Publication
 * holds cancel interrupts off, so an exchange in flight is always settled.
 */
static void
coordinator_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	InterruptPending = true;
	QueryCancelPending = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

static void
call_set_error(DpwinCallShared *call, ErrorData *edata)
{
	call->sqlerrcode = edata->sqlerrcode ? edata->sqlerrcode : ERRCODE_INTERNAL_ERROR;
	strlcpy(call->message, edata->message ? edata->message : "unknown error",
			sizeof(call->message));
	strlcpy(call->detail, edata->detail ? edata->detail : "", sizeof(call->detail));
	strlcpy(call->hint, edata->hint ? edata->hint : "", sizeof(call->hint));
}

static char *
sqlstate_text(int sqlerrcode)
{
	return pstrdup(unpack_sql_state(sqlerrcode));
}

/* Drop every table of this invocation but backups (best effort). */
static void
coordinator_drop_own_tables(Coordinator *c, bool keep_generation)
{
	List	   *tables;
	ListCell   *lc;

	if (c->client == NULL || c->route == NULL)
		return;
	tables = dpwin_target_list_tables(c->client, c->route->target_database,
									  dpwin_invocation_table_prefix(c->route->route_id, &c->id));
	foreach(lc, tables)
	{
		char	   *name = lfirst(lc);

		if (keep_generation && c->generation && strcmp(name, c->generation) == 0)
			continue;
		dpwin_target_drop_table(c->client, c->route->target_database, name);
	}
}

/*
 * Chunk workers stopped in the middle of a request (a cancellation) leave
 * their statement running on the server, since a closed connection does not
 * stop it: a staging table's CREATE could land after the invocation's tables
 * were listed for dropping.  Stop and wait for every statement of this
 * invocation first.  They are found by query_id prefix, and by the
 * invocation's table prefix in their text for servers that do not keep a
 * client's query_id.  Best effort: failing here leaves no more behind than
 * not trying.
 */
static void
coordinator_settle_statements(Coordinator *c)
{
	ChHttpReply reply;
	ChHttpStatus status;
	char	   *sql;

	if (c->client == NULL || c->route == NULL)
		return;
	sql = psprintf("KILL QUERY WHERE (startsWith(query_id, %s) OR position(query, %s) > 0)"
				   " AND query_id != queryID() SYNC FORMAT TabSeparated",
				   ch_quote_literal(c->client->query_id_prefix),
				   ch_quote_literal(dpwin_invocation_table_prefix(c->route->route_id, &c->id)));
	status = ch_try(c->client, sql, ch_next_query_id(c->client, "settle"), NULL, NULL,
					&reply);
	if (status != CHHTTP_OK)
		ereport(LOG,
				(errmsg("dpwin: could not settle the statements of invocation %s: %s",
						dpwin_uuid_text(&c->id), chhttp_status_name(status))));
}

/*
 * After an error: journal it, clean up what is safe to clean up, and hand
 * the error to the caller.  Before publication, or when the UUIDs showed
 * that the exchange did not happen, the invocation fails, every staging
 * and generation table is dropped and the target is untouched; otherwise,
 * from publishing on, nothing is dropped and the state is left for
 * recovery.
 */
static void
coordinator_fail(Coordinator *c, ErrorData *edata)
{
	bool		prepublication = c->state < DPWIN_STATE_PUBLISHING ||
		((c->state == DPWIN_STATE_PUBLISHING || c->state == DPWIN_STATE_UNKNOWN) &&
		 c->not_published);

	call_set_error(c->call, edata);
	if (!c->registered)
		return;

	/* Data may be visible already: tell the caller how to finish. */
	if (!prepublication && !dpwin_state_is_final(c->state) &&
		c->call->hint[0] == '\0')
		snprintf(c->call->hint, sizeof(c->call->hint),
				 "The invocation is %s; SELECT * FROM dpwin.recover('%s') settles it.",
				 dpwin_state_name(c->state), dpwin_uuid_text(&c->id));

	PG_TRY();
	{
		if (prepublication && c->lease_held)
		{
			/* settled: no longer blocks fresh invocations of the target */
			if (c->not_published)
				coordinator_record_outcome(c, "not_published");
			coordinator_transition(c, DPWIN_STATE_FAILED, edata->message,
								   sqlstate_text(edata->sqlerrcode));
		}
	}
	PG_CATCH();
	{
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(c->cxt);

	/*
	 * Without the lease the invocation may be running under another
	 * coordinator (a refused recover() or abandon()): its tables are not
	 * ours to drop.
	 */
	if (prepublication && c->lease_held)
	{
		PG_TRY();
		{
			coordinator_settle_statements(c);
			coordinator_drop_own_tables(c, false);
		}
		PG_CATCH();
		{
			EmitErrorReport();
			FlushErrorState();
		}
		PG_END_TRY();
	}
}

static void
coordinator_fill_result(Coordinator *c)
{
	DpwinCallShared *call = c->call;

	strlcpy(call->state, dpwin_state_name(c->state), sizeof(call->state));
	call->window_lo = c->lo;
	call->window_hi = c->hi;
	call->chunks = c->nchunks ? c->nchunks : list_length(c->chunks);
	call->source_rows = c->source_rows;
	call->staged_rows = c->staged_rows;
	call->final_rows = c->final_rows;
	strlcpy(call->generation_table, c->generation ? c->generation : "",
			sizeof(call->generation_table));
	strlcpy(call->backup_table, c->backup ? c->backup : "",
			sizeof(call->backup_table));
}

/*
 * The caller's current role is often a group role without LOGIN, reached
 * with SET ROLE, and BackgroundWorkerInitializeConnectionByOid() refuses
 * such a role on PostgreSQL 15.  So a dpwin worker logs in as the caller's
 * login role, which could log in, and then takes the caller's current role
 * exactly as SET ROLE does: every privilege check sees that role.
 */
void
dpwin_bgworker_connect(Oid database_id, Oid login_user_id, Oid user_id)
{
	BackgroundWorkerInitializeConnectionByOid(database_id, login_user_id, 0);
	if (user_id != login_user_id)
	{
		bool		is_superuser;

		StartTransactionCommand();
		is_superuser = superuser_arg(user_id);
		CommitTransactionCommand();
		SetCurrentRoleId(user_id, is_superuser);
	}
}

void
dpwin_coordinator_main(Datum main_arg)
{
	dsm_segment *seg;
	DpwinCallShared *call;
	Coordinator c = {0};

	pqsignal(SIGTERM, coordinator_sigterm);
	BackgroundWorkerUnblockSignals();

	seg = dsm_attach(DatumGetUInt32(main_arg));
	if (seg == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dpwin coordinator could not attach to its caller's shared memory"),
				 errdetail("The caller has probably gone away.")));
	call = dsm_segment_address(seg);
	if (call->magic != DPWIN_CALL_MAGIC)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dpwin coordinator found bad magic in shared memory")));

	dpwin_bgworker_connect(call->database_id, call->login_user_id, call->user_id);
	pgstat_report_appname("dpwin coordinator");

	c.call = call;
	c.id = call->invocation_id;
	c.cxt = AllocSetContextCreate(TopMemoryContext, "dpwin coordinator",
								  ALLOCSET_DEFAULT_SIZES);
	c.progress_slot = -1;
	c.state = DPWIN_STATE_PLANNED;
	c.extract_seconds = c.verify_seconds = c.build_seconds = c.publish_seconds = -1;
	dpwin_lease_timeout_ms = call->lease_timeout_ms;

	/*
	 * The journal must survive a crash of this server before dpwin acts on
	 * what it says: the publication intent is committed before the
	 * EXCHANGE, and an asynchronous commit lost in a crash would leave an
	 * exchanged target with no intent to reconcile it by.
	 */
	if (synchronous_commit == SYNCHRONOUS_COMMIT_OFF)
		SetConfigOption("synchronous_commit", "local", PGC_USERSET, PGC_S_OVERRIDE);
	MemoryContextSwitchTo(c.cxt);

	PG_TRY();
	{
		switch (call->mode)
		{
			case DPWIN_CALL_REFRESH:
				coordinator_refresh(&c);
				break;
			case DPWIN_CALL_RECOVER:
				coordinator_recover(&c);
				break;
			case DPWIN_CALL_ABANDON:
				coordinator_abandon(&c);
				break;
		}
		coordinator_fill_result(&c);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/* A cancellation arriving now must not interrupt the clean-up. */
		HOLD_INTERRUPTS();
		MemoryContextSwitchTo(c.cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		MemoryContextSwitchTo(c.cxt);
		ereport(LOG,
				(errmsg("dpwin: invocation %s failed: %s",
						dpwin_uuid_text(&c.id), edata->message)));
		coordinator_fail(&c, edata);
		coordinator_fill_result(&c);
		RESUME_INTERRUPTS();
	}
	PG_END_TRY();

	if (c.lease_held)
		dpwin_lease_release(c.target_id);
	if (c.progress_slot >= 0)
		dpwin_progress_release(c.progress_slot);
	if (c.client)
		ch_client_close(c.client);
	call->finished = true;
	dsm_detach(seg);
	proc_exit(0);
}

/* ----------------------------------------------------------------
 *		plan
 * ---------------------------------------------------------------- */

static char *
sha256_hex(const char *data, size_t len)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	char	   *hex = palloc(PG_SHA256_DIGEST_LENGTH * 2 + 1);

	if (ctx == NULL || pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) data, len) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not compute SHA-256: %s", pg_cryptohash_error(ctx))));
	pg_cryptohash_free(ctx);
	for (int i = 0; i < PG_SHA256_DIGEST_LENGTH; i++)
		sprintf(hex + 2 * i, "%02x", digest[i]);
	return hex;
}

static void
json_key_text(StringInfo buf, const char *key, const char *value, bool comma)
{
	if (comma)
		appendStringInfoString(buf, ", ");
	escape_json(buf, key);
	appendStringInfoString(buf, ": ");
	if (value)
		escape_json(buf, value);
	else
		appendStringInfoString(buf, "null");
}

/* The immutable plan, as jsonb text. */
static char *
coordinator_plan_json(Coordinator *c)
{
	StringInfoData buf;
	ListCell   *lc;
	DpwinRoute *r = c->route;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{");
	json_key_text(&buf, "route", r->route_name, false);
	appendStringInfo(&buf, ", \"route_id\": %d", r->route_id);
	json_key_text(&buf, "interval_end", dpwin_timestamp_utc(c->interval_end), true);
	json_key_text(&buf, "window_lo", dpwin_timestamp_utc(c->lo), true);
	json_key_text(&buf, "window_hi", dpwin_timestamp_utc(c->hi), true);
	appendStringInfo(&buf, ", \"lookback_us\": " INT64_FORMAT ", \"chunk_us\": " INT64_FORMAT,
					 r->lookback_us, r->chunk_us);
	json_key_text(&buf, "source", psprintf("%s.%s", r->source_schema, r->source_table), true);
	json_key_text(&buf, "window_column", r->window_column, true);
	appendStringInfoString(&buf, ", \"columns\": [");
	for (int i = 0; i < r->ncolumns; i++)
	{
		if (i)
			appendStringInfoString(&buf, ", ");
		escape_json(&buf, r->columns[i]);
	}
	appendStringInfoString(&buf, "]");
	json_key_text(&buf, "server", r->server_name, true);
	json_key_text(&buf, "target_database", r->target_database, true);
	json_key_text(&buf, "target_table", r->target_table, true);
	appendStringInfo(&buf, ", \"parallelism\": %d, \"batch_rows\": %d, \"max_encoded_bytes\": " INT64_FORMAT,
					 r->parallelism, r->batch_rows, r->max_encoded_bytes);
	json_key_text(&buf, "config_fingerprint", r->config_fingerprint, true);
	json_key_text(&buf, "digest_key", dpwin_digest_key_to_text(&c->key), true);
	appendStringInfoString(&buf, ", \"chunks\": [");
	foreach(lc, c->chunks)
	{
		DpwinChunkBounds *b = lfirst(lc);

		appendStringInfo(&buf, "%s{\"chunk_no\": %d, ", foreach_current_index(lc) ? ", " : "",
						 b->chunk_no);
		json_key_text(&buf, "lo", dpwin_timestamp_utc(b->lo), false);
		json_key_text(&buf, "hi", dpwin_timestamp_utc(b->hi), true);
		appendStringInfoString(&buf, "}");
	}
	appendStringInfoString(&buf, "]}");
	return buf.data;
}

/* ----------------------------------------------------------------
 *		extraction
 * ---------------------------------------------------------------- */

static void
coordinator_stop_workers(BackgroundWorkerHandle **handles, int n)
{
	for (int i = 0; i < n; i++)
		if (handles[i])
			TerminateBackgroundWorker(handles[i]);
	for (int i = 0; i < n; i++)
		if (handles[i])
			(void) WaitForBackgroundWorkerShutdown(handles[i]);
}

static void
coordinator_extract(Coordinator *c)
{
	StringInfoData types;
	dsm_segment *seg;
	DpwinExtractShared *sh;
	Size		size;
	int			nworkers;
	BackgroundWorkerHandle **handles;
	ListCell   *lc;
	TimestampTz started = GetCurrentTimestamp();

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

	nworkers = Min(Min(c->route->parallelism, dpwin_max_workers), c->nchunks);
	handles = palloc0(sizeof(BackgroundWorkerHandle *) * nworkers);

	/* ONE snapshot for the whole window, held open until every chunk is in. */
	c->snapshot_name = MemoryContextStrdup(c->cxt, dpwin_snapshot_export());
	strlcpy(sh->snapshot_name, c->snapshot_name, sizeof(sh->snapshot_name));

	PG_TRY();
	{
		for (int i = 0; i < nworkers; i++)
		{
			BackgroundWorker worker;
			pid_t		pid;

			memset(&worker, 0, sizeof(worker));
			worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
			worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
			worker.bgw_restart_time = BGW_NEVER_RESTART;
			snprintf(worker.bgw_library_name, BGW_MAXLEN, "dpwin");
			snprintf(worker.bgw_function_name, BGW_MAXLEN, "dpwin_worker_main");
			snprintf(worker.bgw_name, BGW_MAXLEN, "dpwin chunk worker %d of %s",
					 i, dpwin_uuid_text(&c->id));
			snprintf(worker.bgw_type, BGW_MAXLEN, "dpwin chunk worker");
			worker.bgw_main_arg = UInt32GetDatum(dsm_segment_handle(seg));
			worker.bgw_notify_pid = MyProcPid;
			if (!RegisterDynamicBackgroundWorker(&worker, &handles[i]) ||
				WaitForBackgroundWorkerStartup(handles[i], &pid) != BGWH_STARTED)
			{
				/*
				 * A worker that already ran and stopped is fine; one that never
				 * got a slot is not.
				 */
				if (handles[i] == NULL ||
					GetBackgroundWorkerPid(handles[i], &pid) == BGWH_POSTMASTER_DIED)
					ereport(ERROR,
							(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
							 errmsg("could not start dpwin chunk worker %d of %d", i + 1, nworkers),
							 errdetail("No background worker slot was free."),
							 errhint("Raise max_worker_processes, or lower the route's parallelism or dpwin.max_workers.")));
			}
		}

		/* Wait for all of them, staying responsive to cancellation. */
		for (;;)
		{
			bool		running = false;

			for (int i = 0; i < nworkers; i++)
			{
				pid_t		pid;

				if (GetBackgroundWorkerPid(handles[i], &pid) == BGWH_STARTED)
					running = true;
			}
			if (!running)
				break;
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 1000, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_CATCH();
	{
		pg_atomic_write_u32(&sh->stop, 1);
		HOLD_INTERRUPTS();
		coordinator_stop_workers(handles, nworkers);
		RESUME_INTERRUPTS();
		PG_RE_THROW();
	}
	PG_END_TRY();

	/* Every worker has stopped: the snapshot has served its purpose. */
	dpwin_snapshot_close();
	MemoryContextSwitchTo(c->cxt);
	c->extract_seconds = seconds_since(started);

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

	for (int i = 0; i < c->nchunks; i++)
	{
		if (c->slots[i].result != DPWIN_CHUNK_VERIFIED)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("chunk %d of invocation %s was not staged",
							c->slots[i].chunk_no, dpwin_uuid_text(&c->id)),
					 errdetail("A chunk worker stopped before finishing it.")));
		dpwin_digest_merge(&c->source_digest, &c->slots[i].digest);
		c->encoded_bytes += c->slots[i].bytes;
	}
	c->source_rows = (int64) c->source_digest.count;
	c->staged_rows = c->source_rows;
}

Size
dpwin_extract_size(int nchunks, const char *types)
{
	return offsetof(DpwinExtractShared, chunks) +
		sizeof(DpwinChunkSlot) * nchunks + strlen(types) + 1;
}

/* ----------------------------------------------------------------
 *		generation and publication
 * ---------------------------------------------------------------- */

/*
 * Target admission, inside a transaction of its own: type parity consults
 * the system caches.  The result lives in the coordinator's context.
 */
static DpwinTargetInfo *
coordinator_admit(Coordinator *c)
{
	DpwinTargetInfo *info;

	StartTransactionCommand();
	MemoryContextSwitchTo(c->cxt);
	info = dpwin_target_admit(c->client, c->route);
	CommitTransactionCommand();
	MemoryContextSwitchTo(c->cxt);
	return info;
}

/*
 * Re-admit the target under the lease and refuse if it is not the table
 * the plan was made against.
 */
static DpwinTargetInfo *
coordinator_readmit(Coordinator *c, const char *when)
{
	DpwinTargetInfo *now = coordinator_admit(c);

	if (strcmp(now->uuid, c->target->uuid) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("target %s was replaced %s", ch_qualified_name(c->route->target_database, c->route->target_table), when),
				 errdetail("Its UUID was %s and is now %s.", c->target->uuid, now->uuid),
				 errhint("dpwin refuses to publish over a table it did not prepare; start a new invocation.")));
	if (strcmp(now->schema_fingerprint, c->target->schema_fingerprint) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the schema of target %s changed %s",
						ch_qualified_name(c->route->target_database, c->route->target_table), when),
				 errhint("dpwin refuses to publish a generation with a stale schema; start a new invocation.")));
	return now;
}

static void
coordinator_build(Coordinator *c)
{
	DpwinRoute *r = c->route;
	char	   *keep;
	DpwinDigest gen_keep;
	DpwinDigest target_keep;
	DpwinDigest gen_all;
	DpwinDigest expected;
	List	   *staging;
	TimestampTz started = GetCurrentTimestamp();

	coordinator_readmit(c, "before the generation was built");

	c->generation = MemoryContextStrdup(c->cxt, dpwin_generation_name(r->route_id, &c->id));
	keep = dpwin_target_keep_predicate(c->target, r->window_column, c->lo, c->hi);
	dpwin_target_drop_table(c->client, r->target_database, c->generation);
	dpwin_target_create_like(c->client, c->target, c->generation);

	/*
	 * Rows outside the window and NULL-window rows, duplicates included:
	 * partitions wholly outside the window are cloned, not copied, and the
	 * digests below skip them (partition.c verifies them by their parts).
	 */
	staging = NIL;
	for (int i = 0; i < c->nchunks; i++)
		staging = lappend(staging, c->slots[i].staging_table);
	c->partitions = dpwin_partition_plan(c->client, c->target, r->window_column,
										 c->lo, c->hi, staging);
	dpwin_partition_fill_keep(c->client, c->target, c->partitions, c->generation, keep);
	dpwin_partition_digest(c->client, c->target, c->partitions, c->generation, NULL,
						   &c->key, &gen_keep);
	dpwin_partition_digest(c->client, c->target, c->partitions, r->target_table, keep,
						   &c->key, &target_keep);
	if (!dpwin_digest_equal(&gen_keep, &target_keep))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("target %s changed outside the window while the generation was being built",
						ch_qualified_name(r->target_database, r->target_table)),
				 errdetail("Copied %s, target now %s.", dpwin_digest_to_text(&gen_keep),
						   dpwin_digest_to_text(&target_keep)),
				 errhint("Hold dpwin.lock_target() in other writers of the target.")));
	c->keep_digest = gen_keep;

	dpwin_partition_fill_staged(c->client, c->target, c->partitions, c->generation,
								staging);

	c->build_seconds = seconds_since(started);
	started = GetCurrentTimestamp();

	dpwin_partition_verify_cloned(c->client, c->target, c->partitions, c->generation,
								  r->window_column, c->lo, c->hi, keep, &c->key,
								  "while the generation was being built");
	dpwin_partition_digest(c->client, c->target, c->partitions, c->generation, NULL,
						   &c->key, &gen_all);
	expected = c->keep_digest;
	dpwin_digest_merge(&expected, &c->source_digest);
	if (!dpwin_digest_equal(&gen_all, &expected))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("generation %s does not verify", c->generation),
				 errdetail("Expected %s (kept rows plus source), found %s.",
						   dpwin_digest_to_text(&expected),
						   dpwin_digest_to_text(&gen_all))));
	c->final_rows = (int64) gen_all.count + c->partitions->cloned_rows;
	c->verify_seconds = seconds_since(started);
}

/* The outcome of an exchange, read from the tables' UUIDs. */
static const char *
coordinator_reconcile(Coordinator *c, const DpwinPublication *pub,
					  char **target_uuid, char **generation_uuid)
{
	*target_uuid = dpwin_target_table_uuid(c->client, c->route->target_database,
										   c->route->target_table);
	*generation_uuid = dpwin_target_table_uuid(c->client, c->route->target_database,
											   pub->generation_table);
	if (*target_uuid && strcmp(*target_uuid, pub->generation_uuid) == 0)
		return "published";
	if (*target_uuid && strcmp(*target_uuid, pub->target_uuid_before) == 0 &&
		*generation_uuid && strcmp(*generation_uuid, pub->generation_uuid) == 0)
		return "not_published";
	return "unknown";
}

/* After a published exchange the old generation carries the generation's
 * name; give it its backup name (idempotent). */
static void
coordinator_keep_backup(Coordinator *c, const DpwinPublication *pub)
{
	char	   *old = dpwin_target_table_uuid(c->client, c->route->target_database,
											  pub->generation_table);

	if (old && strcmp(old, pub->target_uuid_before) == 0)
		dpwin_target_rename(c->client, c->route->target_database,
							pub->generation_table, pub->backup_table);
	c->backup = MemoryContextStrdup(c->cxt, pub->backup_table);
	c->generation = MemoryContextStrdup(c->cxt, pub->generation_table);
}

static void
coordinator_record_outcome(Coordinator *c, const char *outcome)
{
	xact_begin();
	dpwin_publication_outcome(&c->id, c->target_id, c->epoch, outcome);
	xact_commit();
	MemoryContextSwitchTo(c->cxt);
}

static void
coordinator_report_unknown(Coordinator *c, const DpwinPublication *pub,
						   const char *target_uuid, const char *generation_uuid)
{
	c->not_published = false;
	coordinator_record_outcome(c, "unknown");
	/* recovery of an unknown publication may find it unknown again */
	if (c->state != DPWIN_STATE_UNKNOWN)
		coordinator_transition(c, DPWIN_STATE_UNKNOWN,
							   "publication outcome unknown", "XX001");
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("publication outcome of invocation %s is unknown", dpwin_uuid_text(&c->id)),
			 errdetail("Intent: target %s was %s, generation %s is %s. Found: target %s, %s %s.",
					   c->route->target_table, pub->target_uuid_before,
					   pub->generation_table, pub->generation_uuid,
					   target_uuid ? target_uuid : "missing",
					   pub->generation_table,
					   generation_uuid ? generation_uuid : "missing"),
			 errhint("Every table and journal row is kept. Compare with SELECT * FROM dpwin.reconcile('%s'), repair by hand, then run dpwin.recover().",
					 dpwin_uuid_text(&c->id))));
}

/*
 * Does the server list statements under the query_id the client sent?
 * Only then does ch_settle_query() finding nothing in system.processes
 * prove that a statement whose answer was lost has ended.  A proxy, or an
 * embedded engine such as the test endpoint (docs/endpoint.md), runs
 * statements under ids of its own; there a statement may still be queued
 * or running, invisibly.  The probe looks for itself.
 */
static bool
coordinator_query_ids_visible(Coordinator *c)
{
	char	   *query_id = ch_next_query_id(c->client, "probe-query-id");
	char	   *answer;

	answer = ch_exec_id(c->client,
						psprintf("SELECT count() FROM system.processes WHERE query_id = %s"
								 " FORMAT TabSeparated", ch_quote_literal(query_id)),
						query_id);
	return strtol(answer, NULL, 10) == 1;
}

/*
 * The EXCHANGE got no answer and the UUIDs still show the target as it
 * was, but nothing proves that the statement has ended: exchanging again
 * now could be undone when it runs after all.  Stop in publishing, with
 * every table kept, for dpwin.recover() to settle once it has ended.
 */
pg_noreturn static void coordinator_report_pending(Coordinator *c, const char *query_id,
												   ChHttpStatus status);

static void
coordinator_report_pending(Coordinator *c, const char *query_id,
						   ChHttpStatus status)
{
	c->not_published = false;
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("the EXCHANGE of invocation %s got no answer (%s) and may still run on ClickHouse",
					dpwin_uuid_text(&c->id), chhttp_status_name(status)),
			 errdetail("The target still has its old UUID, but the server cannot show whether statement %s has ended; exchanging again could be undone by it.",
					   query_id),
			 errhint("Once the statement has ended, SELECT * FROM dpwin.recover('%s') settles the invocation: it finishes the publication if the EXCHANGE ran, and retries it once if not.",
					 dpwin_uuid_text(&c->id))));
}

/*
 * One EXCHANGE, then the authoritative answer from the UUIDs.  Returns the
 * outcome; a lost reply is settled on the server first.  "pending" when the
 * reply was lost, the UUIDs say not published, and the server cannot show
 * that the statement has ended.
 */
static const char *
coordinator_exchange(Coordinator *c, const DpwinPublication *pub,
					 const char *query_id,
					 char **target_uuid, char **generation_uuid,
					 ChHttpStatus *status, ChHttpReply *reply)
{
	const char *outcome;

	*status = dpwin_target_exchange(c->client, c->target, pub->generation_table,
									query_id, reply);
	if (*status != CHHTTP_OK && ch_status_outcome_unknown(*status))
		ch_settle_query(c->client, query_id);
	outcome = coordinator_reconcile(c, pub, target_uuid, generation_uuid);
	if (strcmp(outcome, "not_published") == 0 && ch_status_outcome_unknown(*status) &&
		!coordinator_query_ids_visible(c))
		outcome = "pending";
	return outcome;
}

static void
coordinator_publish(Coordinator *c)
{
	DpwinPublication pub;
	DpwinTargetInfo *now;
	DpwinDigest target_keep;
	const char *outcome;
	char	   *target_uuid;
	char	   *generation_uuid;
	ChHttpStatus status;
	ChHttpReply reply;
	TimestampTz started;
	char	   *keep;
	char	   *query_id;

	/* Under the lease, right before EXCHANGE: is the target still ours? */
	now = coordinator_readmit(c, "between generation build and publication");
	keep = dpwin_target_keep_predicate(c->target, c->route->window_column, c->lo, c->hi);
	dpwin_partition_verify_cloned(c->client, c->target, c->partitions, c->generation,
								  c->route->window_column, c->lo, c->hi, keep, &c->key,
								  "between generation build and publication");
	dpwin_partition_digest(c->client, c->target, c->partitions, c->route->target_table,
						   keep, &c->key, &target_keep);
	if (!dpwin_digest_equal(&target_keep, &c->keep_digest))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("target %s changed between generation build and publication",
						ch_qualified_name(c->route->target_database, c->route->target_table)),
				 errdetail("Outside-window rows were %s and are now %s.",
						   dpwin_digest_to_text(&c->keep_digest),
						   dpwin_digest_to_text(&target_keep)),
				 errhint("The changed target is kept as it is. Hold dpwin.lock_target() in other writers, then start a new invocation.")));

	pub.target_uuid_before = now->uuid;
	pub.generation_table = c->generation;
	pub.generation_uuid = dpwin_target_table_uuid(c->client, c->route->target_database,
												  c->generation);
	if (pub.generation_uuid == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("generation %s vanished before publication", c->generation)));
	pub.backup_table = dpwin_backup_name(c->route->route_id, &c->id, c->interval_end);
	pub.outcome = NULL;

	/* A cancellation that arrived during the build stops us here. */
	CHECK_FOR_INTERRUPTS();

	/* The intent, naming the statement, is durable before it can run. */
	query_id = ch_next_query_id(c->client, "exchange");
	xact_begin();
	dpwin_publication_intent(&c->id, c->target_id, c->epoch, &pub, query_id);
	dpwin_registry_transition(&c->id, DPWIN_STATE_PUBLISHING, c->epoch, NULL, NULL);
	xact_commit();
	MemoryContextSwitchTo(c->cxt);
	c->state = DPWIN_STATE_PUBLISHING;
	dpwin_progress_phase(c->progress_slot, "publishing");

	/* From here on, a cancellation waits until the outcome is settled. */
	HOLD_CANCEL_INTERRUPTS();
	started = GetCurrentTimestamp();
	outcome = coordinator_exchange(c, &pub, query_id, &target_uuid, &generation_uuid,
								   &status, &reply);

	/*
	 * Not published after a lost reply, and the lost statement known to have
	 * ended: the one permitted retry.
	 */
	if (strcmp(outcome, "not_published") == 0 && ch_status_outcome_unknown(status))
	{
		query_id = ch_next_query_id(c->client, "exchange");
		outcome = coordinator_exchange(c, &pub, query_id, &target_uuid, &generation_uuid,
									   &status, &reply);
	}
	if (strcmp(outcome, "pending") == 0)
		coordinator_report_pending(c, query_id, status);

	if (strcmp(outcome, "published") == 0)
	{
		coordinator_record_outcome(c, "published");
		coordinator_transition(c, DPWIN_STATE_PUBLISHED, NULL, NULL);
		c->publish_seconds = seconds_since(started);
		coordinator_keep_backup(c, &pub);
	}
	else if (strcmp(outcome, "not_published") == 0)
	{
		/*
		 * The target is untouched: fail like any error before publication
		 * (coordinator_fail() journals the outcome).
		 */
		c->not_published = true;
		RESUME_CANCEL_INTERRUPTS();
		if (status != CHHTTP_OK)
			ch_report(status, &reply, "exchanging the target with its new generation");
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("EXCHANGE reported success but the target's UUID did not change")));
	}
	else
		coordinator_report_unknown(c, &pub, target_uuid, generation_uuid);

	/*
	 * Published: cancellation stays held off until the process exits, so
	 * evidence and state follow the exchange without interruption.
	 */
}

/* ----------------------------------------------------------------
 *		evidence, state, clean-up
 * ---------------------------------------------------------------- */

static void
json_seconds(StringInfo buf, const char *key, double seconds)
{
	if (seconds < 0)
		appendStringInfo(buf, ", \"%s\": \"unavailable\"", key);
	else
		appendStringInfo(buf, ", \"%s\": %.6f", key, seconds);
}

/* Window and chunk metrics, from the generation and the journal. */
static char *
coordinator_metrics(Coordinator *c)
{
	StringInfoData buf;
	char	   *days;
	char	   *bounds;
	char	   *w = ch_quote_ident(c->route->window_column);
	char	   *tbl = ch_qualified_name(c->route->target_database, c->route->target_table);
	char	   *inwin;

	/* The published generation is the target now. */
	inwin = dpwin_target_window_predicate(c->target, c->route->window_column,
										  c->lo, c->hi);
	/*
	 * PREWHERE, not WHERE: choosing what to move to PREWHERE costs the
	 * server about a millisecond per part, 0.25 s on a 300-partition
	 * target (docs/benchmark.md).
	 */
	days = ch_scalar(c->client,
					 psprintf("SELECT toJSONString(CAST((groupArray(d), groupArray(n)) AS Tuple(days Array(String), rows Array(UInt64))))"
							  " FROM (SELECT toString(toDate32(%s)) AS d, count() AS n FROM %s"
							  " PREWHERE %s GROUP BY d ORDER BY d)", w, tbl, inwin));
	bounds = ch_scalar(c->client,
					   psprintf("SELECT toJSONString(CAST((toString(minOrNull(w)), toString(maxOrNull(w)), countIf(NOT isNull(w)), countIf(isNull(w))) AS"
								" Tuple(min Nullable(String), max Nullable(String), window_rows UInt64, null_window_rows UInt64)))"
								" FROM (SELECT %s AS w FROM %s WHERE (%s) OR isNull(%s))",
								w, tbl, inwin, w));

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{");
	json_key_text(&buf, "invocation_id", dpwin_uuid_text(&c->id), false);
	json_key_text(&buf, "window_lo", dpwin_timestamp_utc(c->lo), true);
	json_key_text(&buf, "window_hi", dpwin_timestamp_utc(c->hi), true);
	appendStringInfo(&buf, ", \"chunks\": %d", c->nchunks);
	appendStringInfo(&buf, ", \"source_rows\": " INT64_FORMAT ", \"staging_rows\": " INT64_FORMAT
					 ", \"target_rows\": " INT64_FORMAT ", \"kept_rows\": " UINT64_FORMAT
					 ", \"encoded_bytes\": " INT64_FORMAT,
					 c->source_rows, c->staged_rows, c->final_rows,
					 c->keep_digest.count + (c->partitions ? c->partitions->cloned_rows : 0),
					 c->encoded_bytes);
	appendStringInfo(&buf, ", \"partitions\": %s", dpwin_partition_plan_json(c->partitions));
	json_key_text(&buf, "source_digest", dpwin_digest_to_text(&c->source_digest), true);
	appendStringInfo(&buf, ", \"utc_days\": %s", days);
	appendStringInfo(&buf, ", \"window_bounds\": %s", bounds);
	appendStringInfoString(&buf, ", \"chunk_metrics\": [");
	for (int i = 0; i < c->nchunks; i++)
	{
		DpwinChunkSlot *s = &c->slots[i];

		appendStringInfo(&buf, "%s{\"chunk_no\": %d, \"rows\": " UINT64_FORMAT ", \"bytes\": " UINT64_FORMAT
						 ", \"attempts\": %d, \"seconds\": %.6f}",
						 i ? ", " : "", s->chunk_no, s->rows, s->bytes, s->attempts, s->seconds);
	}
	appendStringInfoString(&buf, "]");
	appendStringInfoString(&buf, ", \"phases\": {");
	appendStringInfoString(&buf, "\"note\": \"stage_seconds covers overlapped source, encoding, HTTP and per-chunk verification\"");
	json_seconds(&buf, "stage_seconds", c->extract_seconds);
	json_seconds(&buf, "build_seconds", c->build_seconds);
	json_seconds(&buf, "verify_seconds", c->verify_seconds);
	json_seconds(&buf, "publish_seconds", c->publish_seconds);
	appendStringInfoString(&buf, "}");
	json_key_text(&buf, "generation_table", c->generation, true);
	json_key_text(&buf, "backup_table", c->backup, true);
	appendStringInfoString(&buf, "}");
	return buf.data;
}

static void
coordinator_finish(Coordinator *c)
{
	char	   *metrics = NULL;

	if (c->state == DPWIN_STATE_PUBLISHED)
	{
		metrics = coordinator_metrics(c);
		xact_begin();
		dpwin_evidence_write(&c->id, c->route->route_id, c->target_id, c->epoch,
							 metrics, c->route->evidence_function);
		dpwin_registry_transition(&c->id, DPWIN_STATE_EVIDENCED, c->epoch, NULL, NULL);
		xact_commit();
		MemoryContextSwitchTo(c->cxt);
		c->state = DPWIN_STATE_EVIDENCED;
	}
	if (c->state == DPWIN_STATE_EVIDENCED)
	{
		StringInfoData details;

		xact_begin();
		dpwin_route_state_advance(c->route->route_id, c->interval_end, &c->id,
								  c->target_id, c->epoch);
		dpwin_registry_transition(&c->id, DPWIN_STATE_COMPLETED, c->epoch, NULL, NULL);
		if (metrics == NULL)
		{
			Oid			types[1] = {UUIDOID};
			Datum		args[1] = {UUIDPGetDatum(&c->id)};

			if (dpwin_catalog_exec("SELECT metrics::text FROM dpwin.evidence WHERE invocation_id = $1",
								   1, types, args, NULL, true) == 1)
				metrics = MemoryContextStrdup(c->cxt, dpwin_catalog_text(0, 1));
		}
		initStringInfo(&details);
		appendStringInfoString(&details, "{");
		json_key_text(&details, "window_lo", dpwin_timestamp_utc(c->lo), false);
		json_key_text(&details, "window_hi", dpwin_timestamp_utc(c->hi), true);
		json_key_text(&details, "interval_end", dpwin_timestamp_utc(c->interval_end), true);
		appendStringInfo(&details, ", \"evidence\": %s}", metrics ? metrics : "null");
		dpwin_registry_set_result(&c->id, details.data);

		/*
		 * The caller reads the whole result from the registry; the shared
		 * segment has a fixed size, and a cut-off copy would not be JSON.
		 */
		if ((Size) details.len < sizeof(c->call->details))
			strlcpy(c->call->details, details.data, sizeof(c->call->details));
		else
			snprintf(c->call->details, sizeof(c->call->details),
					 "{\"window_lo\": \"%s\", \"window_hi\": \"%s\", \"interval_end\": \"%s\", \"evidence\": null}",
					 dpwin_timestamp_utc(c->lo), dpwin_timestamp_utc(c->hi),
					 dpwin_timestamp_utc(c->interval_end));
		xact_commit();
		MemoryContextSwitchTo(c->cxt);
		c->state = DPWIN_STATE_COMPLETED;
	}

	/* Staging tables are not needed any more; backups stay. */
	coordinator_drop_own_tables(c, false);
}

/* ----------------------------------------------------------------
 *		refresh
 * ---------------------------------------------------------------- */

static void
coordinator_load(Coordinator *c, int32 route_id)
{
	xact_begin();
	MemoryContextSwitchTo(c->cxt);
	c->route = dpwin_route_load_by_id(route_id);
	dpwin_route_check_can_refresh(c->route);
	c->conf = dpwin_server_conf(c->route->server_name, GetUserId());
	c->target_id = dpwin_lease_target_id(c->route->server_name,
										 c->route->target_database,
										 c->route->target_table);
	xact_commit();
	MemoryContextSwitchTo(c->cxt);
	c->client = ch_client_open(c->conf, psprintf("dpwin-%s-", dpwin_uuid_text(&c->id)));
}

static void
coordinator_take_lease(Coordinator *c)
{
	c->epoch = dpwin_lease_acquire(c->target_id, &c->id);
	c->lease_held = true;
	MemoryContextSwitchTo(c->cxt);
}

/*
 * The table prefixes of this target's invocations left in planned or
 * extracting by a coordinator that is gone (we hold the lease, which every
 * running coordinator holds), which dpwin_registry_expire_orphans() is
 * about to mark snapshot_expired.  Their staging tables can never be
 * published, and recover() of such an invocation would drop them: the
 * invocation that expires them drops them too, so that none is left for
 * the DBA to find.  Needs SPI; the result lives in the coordinator's
 * context.
 */
static List *
coordinator_orphan_prefixes(Coordinator *c)
{
	Oid			types[2] = {INT4OID, UUIDOID};
	Datum		args[2] = {Int32GetDatum(c->target_id), UUIDPGetDatum(&c->id)};
	List	   *prefixes = NIL;
	uint64		n;

	n = dpwin_catalog_exec("SELECT route_id, invocation_id FROM dpwin.invocation"
						   " WHERE target_id = $1 AND invocation_id <> $2"
						   "   AND state IN ('planned', 'extracting')",
						   2, types, args, NULL, true);
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;
		int32		route_id = DatumGetInt32(dpwin_catalog_value(i, 1, &isnull));
		pg_uuid_t  *id = DatumGetUUIDP(dpwin_catalog_value(i, 2, &isnull));
		char	   *prefix = dpwin_invocation_table_prefix(route_id, id);

		prefixes = lappend(prefixes, MemoryContextStrdup(c->cxt, prefix));
	}
	return prefixes;
}

/* Drop the tables of expired orphans (best effort: abandon() also does it). */
static void
coordinator_drop_orphan_tables(Coordinator *c, List *prefixes)
{
	ListCell   *lc;

	foreach(lc, prefixes)
	{
		PG_TRY();
		{
			List	   *tables = dpwin_target_list_tables(c->client,
														  c->route->target_database,
														  lfirst(lc));
			ListCell   *lc2;

			foreach(lc2, tables)
				dpwin_target_drop_table(c->client, c->route->target_database,
										lfirst(lc2));
		}
		PG_CATCH();
		{
			EmitErrorReport();
			FlushErrorState();
		}
		PG_END_TRY();
		MemoryContextSwitchTo(c->cxt);
	}
}

static void
coordinator_refresh(Coordinator *c)
{
	DpwinInvocation inv = {0};
	char	   *older;
	List	   *orphans;

	coordinator_load(c, c->call->route_id);
	coordinator_take_lease(c);

	c->interval_end = c->call->interval_end;
	c->chunks = dpwin_window_chunks(c->interval_end, c->route->lookback_us,
									c->route->chunk_us);
	c->lo = ((DpwinChunkBounds *) linitial(c->chunks))->lo;
	c->hi = c->interval_end;
	dpwin_digest_key_generate(&c->key);

	xact_begin();
	older = dpwin_registry_unsettled_publication(c->target_id, &c->id);
	if (older)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("invocation %s of this target has an unsettled publication", older),
				 errdetail("A fresh invocation cannot bypass it."),
				 errhint("Settle it first: SELECT * FROM dpwin.recover('%s');", older)));
	orphans = coordinator_orphan_prefixes(c);
	dpwin_registry_expire_orphans(c->target_id, c->epoch, &c->id);
	MemoryContextSwitchTo(c->cxt);
	inv.id = c->id;
	inv.route_id = c->route->route_id;
	inv.target_id = c->target_id;
	inv.interval_end = c->interval_end;
	inv.window_lo = c->lo;
	inv.window_hi = c->hi;
	inv.plan = coordinator_plan_json(c);
	inv.plan_fingerprint = sha256_hex(inv.plan, strlen(inv.plan));
	inv.config_fingerprint = c->route->config_fingerprint;
	inv.lease_epoch = c->epoch;
	inv.caller_role = GetUserId();
	dpwin_registry_create(&inv, c->chunks);
	xact_commit();
	MemoryContextSwitchTo(c->cxt);
	c->registered = true;
	coordinator_drop_orphan_tables(c, orphans);
	c->progress_slot = dpwin_progress_claim(&c->id, c->route->route_id,
											list_length(c->chunks));

	/* Admission under the lease, before any data moves. */
	dpwin_progress_phase(c->progress_slot, "admission");
	c->target = coordinator_admit(c);
	dpwin_target_probe_exchange(c->client, c->route->target_database);
	xact_begin();
	dpwin_registry_set_schema(&c->id, c->epoch, c->target->schema_fingerprint);
	dpwin_registry_transition(&c->id, DPWIN_STATE_EXTRACTING, c->epoch, NULL, NULL);
	xact_commit();
	MemoryContextSwitchTo(c->cxt);
	c->state = DPWIN_STATE_EXTRACTING;
	dpwin_progress_phase(c->progress_slot, "extracting");

	coordinator_extract(c);

	xact_begin();
	dpwin_registry_set_snapshot(&c->id, c->epoch, c->snapshot_name);
	dpwin_registry_transition(&c->id, DPWIN_STATE_STAGED, c->epoch, NULL, NULL);
	dpwin_registry_transition(&c->id, DPWIN_STATE_VERIFIED, c->epoch, NULL, NULL);
	xact_commit();
	MemoryContextSwitchTo(c->cxt);
	c->state = DPWIN_STATE_VERIFIED;
	dpwin_progress_phase(c->progress_slot, "building");

	coordinator_build(c);
	coordinator_publish(c);
	coordinator_finish(c);
}

/* ----------------------------------------------------------------
 *		recovery
 * ---------------------------------------------------------------- */

/* Rebuild what the coordinator knew from the journal and the plan. */
static DpwinInvocation *
coordinator_load_invocation(Coordinator *c)
{
	DpwinInvocation *inv;
	Oid			types[1] = {UUIDOID};
	Datum		args[1] = {UUIDPGetDatum(&c->call->invocation_id)};
	char	   *key;

	xact_begin();
	MemoryContextSwitchTo(c->cxt);
	inv = dpwin_registry_load(&c->id, false);
	c->interval_end = inv->interval_end;
	c->lo = inv->window_lo;
	c->hi = inv->window_hi;
	c->state = inv->state;
	c->registered = true;
	if (dpwin_catalog_exec("SELECT plan->>'digest_key' FROM dpwin.invocation WHERE invocation_id = $1",
						   1, types, args, NULL, true) == 1 &&
		(key = dpwin_catalog_text(0, 1)) != NULL)
		(void) dpwin_digest_key_from_text(key, &c->key);

	/* The chunk journal, for metrics and for publishing staged chunks. */
	c->nchunks = (int) dpwin_catalog_exec("SELECT chunk_no, state, staging_table, rows, bytes,"
										  " digest, attempt + 1"
										  " FROM dpwin.chunk WHERE invocation_id = $1 ORDER BY chunk_no",
										  1, types, args, NULL, true);
	/* SPI switched to its own context, which goes away at commit */
	MemoryContextSwitchTo(c->cxt);
	c->slots = palloc0(sizeof(DpwinChunkSlot) * Max(c->nchunks, 1));
	for (int i = 0; i < c->nchunks; i++)
	{
		DpwinChunkSlot *s = &c->slots[i];
		char	   *v;

		s->chunk_no = atoi(dpwin_catalog_text(i, 1));
		s->result = strcmp(dpwin_catalog_text(i, 2), "verified") == 0 ?
			DPWIN_CHUNK_VERIFIED : DPWIN_CHUNK_FAILED;
		if ((v = dpwin_catalog_text(i, 3)) != NULL)
			strlcpy(s->staging_table, v, sizeof(s->staging_table));
		if ((v = dpwin_catalog_text(i, 4)) != NULL)
			s->rows = strtoull(v, NULL, 10);
		if ((v = dpwin_catalog_text(i, 5)) != NULL)
			s->bytes = strtoull(v, NULL, 10);
		if ((v = dpwin_catalog_text(i, 6)) != NULL)
			(void) dpwin_digest_from_text(v, &s->digest);
		s->attempts = atoi(dpwin_catalog_text(i, 7));
		s->seconds = 0;
		if (s->result == DPWIN_CHUNK_VERIFIED)
		{
			dpwin_digest_merge(&c->source_digest, &s->digest);
			c->encoded_bytes += s->bytes;
		}
	}
	c->source_rows = c->staged_rows = (int64) c->source_digest.count;
	xact_commit();
	MemoryContextSwitchTo(c->cxt);
	return inv;
}

static void
coordinator_recover(Coordinator *c)
{
	DpwinInvocation *inv = coordinator_load_invocation(c);
	DpwinPublication *pub = NULL;

	if (inv->state == DPWIN_STATE_COMPLETED)
	{
		coordinator_load(c, inv->route_id);
		coordinator_finish(c);
		return;
	}
	if (inv->state == DPWIN_STATE_SNAPSHOT_EXPIRED)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("invocation %s cannot be recovered: its snapshot expired before publication",
						dpwin_uuid_text(&c->id)),
				 errhint("Start a new invocation; it re-extracts the whole window.")));
	if (dpwin_state_is_final(inv->state))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("invocation %s is %s and has nothing to recover",
						dpwin_uuid_text(&c->id), dpwin_state_name(inv->state)),
				 errhint("Start a new invocation.")));

	coordinator_load(c, inv->route_id);
	coordinator_take_lease(c);
	c->progress_slot = dpwin_progress_claim(&c->id, c->route->route_id, c->nchunks);
	dpwin_progress_phase(c->progress_slot, "recovering");

	switch (inv->state)
	{
		case DPWIN_STATE_PLANNED:
		case DPWIN_STATE_EXTRACTING:
			/* We hold the lease, so its coordinator is gone, and so is its snapshot. */
			coordinator_transition(c, DPWIN_STATE_SNAPSHOT_EXPIRED,
								   "the coordinator ended before extraction finished; its snapshot is gone",
								   "55000");
			coordinator_drop_own_tables(c, false);
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("invocation %s cannot be recovered: its snapshot expired before publication",
							dpwin_uuid_text(&c->id)),
					 errhint("Start a new invocation; it re-extracts the whole window.")));
			break;

		case DPWIN_STATE_STAGED:
		case DPWIN_STATE_VERIFIED:

			/*
			 * Every chunk was staged and verified under one snapshot that was
			 * closed normally: the receipts are consistent, and publishing
			 * them needs no snapshot.
			 */
			for (int i = 0; i < c->nchunks; i++)
				if (c->slots[i].result != DPWIN_CHUNK_VERIFIED)
					elog(ERROR, "chunk %d of a staged invocation is not verified",
						 c->slots[i].chunk_no);
			if (inv->state == DPWIN_STATE_STAGED)
				coordinator_transition(c, DPWIN_STATE_VERIFIED, NULL, NULL);
			c->target = coordinator_admit(c);
			if (inv->schema_fingerprint &&
				strcmp(inv->schema_fingerprint, c->target->schema_fingerprint) != 0)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("the schema of the target changed since invocation %s was planned",
								dpwin_uuid_text(&c->id)),
						 errhint("Abandon it with dpwin.abandon() and start a new invocation.")));
			coordinator_build(c);
			coordinator_publish(c);
			break;

		case DPWIN_STATE_PUBLISHING:
		case DPWIN_STATE_UNKNOWN:
			{
				const char *outcome;
				char	   *target_uuid;
				char	   *generation_uuid;

				xact_begin();
				MemoryContextSwitchTo(c->cxt);
				pub = dpwin_publication_load(&c->id);
				xact_commit();
				MemoryContextSwitchTo(c->cxt);
				if (pub == NULL)
					elog(ERROR, "invocation %s is publishing without an intent",
						 dpwin_uuid_text(&c->id));

				/*
				 * Recognise an already published UUID pair before any
				 * admission, so that a later legitimate schema change cannot
				 * hide it.
				 */
				outcome = coordinator_reconcile(c, pub, &target_uuid, &generation_uuid);
				if (strcmp(outcome, "published") == 0)
				{
					coordinator_record_outcome(c, "published");
					coordinator_transition(c, DPWIN_STATE_PUBLISHED, NULL, NULL);
					coordinator_keep_backup(c, pub);
				}
				else if (strcmp(outcome, "not_published") == 0)
				{
					ChHttpStatus status;
					ChHttpReply reply;
					DpwinDigest target_keep;
					DpwinDigest gen_keep;
					char	   *keep;
					char	   *query_id;
					char	   *qtarget = ch_qualified_name(c->route->target_database,
															c->route->target_table);

					/*
					 * The exchange did not happen (or was undone by hand).
					 * It may be retried once, under the lease, while the
					 * target is still the table the generation was built
					 * from: same UUID, same schema, same rows outside the
					 * window.  Otherwise the stale generation is refused
					 * and the changed target kept, as before a first
					 * exchange.  A refusal settles it as not published; a
					 * transient error leaves it for another recover().
					 */
					PG_TRY();
					{
						c->target = coordinator_admit(c);
					}
					PG_CATCH();
					{
						MemoryContext ecxt = MemoryContextSwitchTo(c->cxt);
						ErrorData  *edata = CopyErrorData();

						MemoryContextSwitchTo(ecxt);
						/* the target no longer admits this generation */
						if (edata->sqlerrcode == ERRCODE_DATATYPE_MISMATCH ||
							edata->sqlerrcode == ERRCODE_FEATURE_NOT_SUPPORTED ||
							edata->sqlerrcode == ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE)
							c->not_published = true;
						FreeErrorData(edata);
						PG_RE_THROW();
					}
					PG_END_TRY();
					if (strcmp(c->target->uuid, pub->target_uuid_before) != 0)
						coordinator_report_unknown(c, pub, target_uuid, generation_uuid);
					if (inv->schema_fingerprint &&
						strcmp(inv->schema_fingerprint, c->target->schema_fingerprint) != 0)
					{
						c->not_published = true;
						ereport(ERROR,
								(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
								 errmsg("the schema of target %s changed since invocation %s built its generation",
										qtarget, dpwin_uuid_text(&c->id)),
								 errhint("The changed target is kept as it is; start a new invocation.")));
					}
					keep = dpwin_target_keep_predicate(c->target, c->route->window_column,
													   c->lo, c->hi);
					dpwin_target_digest(c->client, c->target, c->route->target_table, keep,
										&c->key, &target_keep);
					dpwin_target_digest(c->client, c->target, pub->generation_table, keep,
										&c->key, &gen_keep);
					if (!dpwin_digest_equal(&target_keep, &gen_keep))
					{
						c->not_published = true;
						ereport(ERROR,
								(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
								 errmsg("target %s changed outside the window since invocation %s built its generation",
										qtarget, dpwin_uuid_text(&c->id)),
								 errdetail("Outside-window rows are %s in the target and %s in the generation.",
										   dpwin_digest_to_text(&target_keep),
										   dpwin_digest_to_text(&gen_keep)),
								 errhint("The changed target is kept as it is; start a new invocation.")));
					}
					c->generation = MemoryContextStrdup(c->cxt, pub->generation_table);
					query_id = ch_next_query_id(c->client, "exchange");
					HOLD_CANCEL_INTERRUPTS();
					outcome = coordinator_exchange(c, pub, query_id, &target_uuid,
												   &generation_uuid, &status, &reply);
					RESUME_CANCEL_INTERRUPTS();
					if (strcmp(outcome, "published") == 0)
					{
						coordinator_record_outcome(c, "published");
						coordinator_transition(c, DPWIN_STATE_PUBLISHED, NULL, NULL);
						coordinator_keep_backup(c, pub);
					}
					else if (strcmp(outcome, "pending") == 0)
						coordinator_report_pending(c, query_id, status);
					else if (strcmp(outcome, "not_published") == 0)
					{
						/* coordinator_fail() marks it failed */
						c->not_published = true;
						if (status != CHHTTP_OK)
							ch_report(status, &reply, "retrying the exchange");
						ereport(ERROR,
								(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
								 errmsg("the exchange of invocation %s did not happen", dpwin_uuid_text(&c->id))));
					}
					else
						coordinator_report_unknown(c, pub, target_uuid, generation_uuid);
				}
				else
					coordinator_report_unknown(c, pub, target_uuid, generation_uuid);
			}
			break;

		case DPWIN_STATE_PUBLISHED:
			xact_begin();
			MemoryContextSwitchTo(c->cxt);
			pub = dpwin_publication_load(&c->id);
			xact_commit();
			MemoryContextSwitchTo(c->cxt);
			if (pub)
				coordinator_keep_backup(c, pub);
			break;

		default:
			break;
	}

	if (c->state == DPWIN_STATE_PUBLISHED || c->state == DPWIN_STATE_EVIDENCED)
	{
		DpwinPublication *p;

		xact_begin();
		MemoryContextSwitchTo(c->cxt);
		p = dpwin_publication_load(&c->id);
		xact_commit();
		MemoryContextSwitchTo(c->cxt);
		if (p)
		{
			c->generation = MemoryContextStrdup(c->cxt, p->generation_table);
			c->backup = MemoryContextStrdup(c->cxt, p->backup_table);
		}
		c->final_rows = -1;
		{
			char	   *n = ch_scalar(c->client,
									  psprintf("SELECT count() FROM %s",
											   ch_qualified_name(c->route->target_database,
																 c->route->target_table)));

			c->final_rows = strtoll(n, NULL, 10);
		}
		/* Only the count of the kept rows is evidence; the build had it. */
		if (c->keep_digest.count == 0 && c->final_rows > c->source_rows)
			c->keep_digest.count = (uint64) (c->final_rows - c->source_rows);
		coordinator_finish(c);
	}
}

static void
coordinator_abandon(Coordinator *c)
{
	DpwinInvocation *inv = coordinator_load_invocation(c);
	DpwinPublication *pub;

	xact_begin();
	MemoryContextSwitchTo(c->cxt);
	pub = dpwin_publication_load(&c->id);
	xact_commit();
	MemoryContextSwitchTo(c->cxt);
	if (pub != NULL ||
		(inv->state >= DPWIN_STATE_PUBLISHING && inv->state != DPWIN_STATE_FAILED &&
		 inv->state != DPWIN_STATE_ABANDONED && inv->state != DPWIN_STATE_SNAPSHOT_EXPIRED))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("invocation %s has a publication intent and cannot be abandoned",
						dpwin_uuid_text(&c->id)),
				 errhint("Use dpwin.recover() to settle it.")));
	if (inv->state == DPWIN_STATE_ABANDONED)
		return;

	coordinator_load(c, inv->route_id);
	coordinator_take_lease(c);
	coordinator_drop_own_tables(c, false);
	if (inv->state != DPWIN_STATE_SNAPSHOT_EXPIRED)
		coordinator_transition(c, DPWIN_STATE_ABANDONED, "abandoned by request", NULL);
}
