/*-------------------------------------------------------------------------
 *
 * coordinator.c
 *	  The refresh state machine: the composition root of dpwin, and the
 *	  only file that knows every capability (docs/design.md, "The state
 *	  machine").
 *
 *	  planned -> extracting -> staged -> verified -> publishing
 *		  -> published -> evidenced -> completed
 *
 *	  One step function per state (stage.c, publish.c, finish.c) does that
 *	  state's work and returns the next state; coordinator_run() calls them
 *	  in turn, and every change of state is journaled through
 *	  dpwin_registry_transition(), which checks the legal predecessor.  A
 *	  refresh registers its invocation and enters at planned; recovery
 *	  loads the journal and enters the same loop at the state it records,
 *	  so that no step exists twice.  Abandonment is not a step: it only
 *	  ends an invocation that never published.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "bgworker.h"
#include "catalog.h"
#include "coordinator.h"
#include "lease.h"
#include "names.h"
#include "progress.h"
#include "window.h"

/* The step of each state that is not final. */
typedef struct CoordinatorStep
{
	const char *phase;			/* as dpwin.progress shows it */
	DpwinState	(*run) (Coordinator *c);
} CoordinatorStep;

static const CoordinatorStep steps[DPWIN_NSTATES] = {
	[DPWIN_STATE_PLANNED] = {"admission", step_admit},
	[DPWIN_STATE_EXTRACTING] = {"extracting", step_extract},
	[DPWIN_STATE_STAGED] = {"staged", step_check_receipts},
	[DPWIN_STATE_VERIFIED] = {"building", step_build},
	[DPWIN_STATE_PUBLISHING] = {"publishing", step_publish},
	[DPWIN_STATE_UNKNOWN] = {"publishing", step_publish},
	[DPWIN_STATE_PUBLISHED] = {"evidence", step_evidence},
	[DPWIN_STATE_EVIDENCED] = {"completing", step_advance},
};

/* ----------------------------------------------------------------
 *		shared by the steps
 * ---------------------------------------------------------------- */

double
coordinator_seconds_since(TimestampTz start)
{
	return (double) (GetCurrentTimestamp() - start) / USECS_PER_SEC;
}

void
coordinator_json_text(StringInfo buf, const char *key, const char *value, bool comma)
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

/* Journal a state change in a transaction of its own. */
void
coordinator_transition(Coordinator *c, DpwinState to, const char *message,
					   const char *sqlstate)
{
	dpwin_xact_begin("dpwin: state change");
	dpwin_registry_transition(&c->id, to, c->epoch, message, sqlstate);
	dpwin_xact_commit(c->cxt);
	c->state = to;
}

/* Drop every table of this invocation but backups (best effort). */
void
coordinator_drop_own_tables(Coordinator *c)
{
	List	   *tables;
	ListCell   *lc;

	if (c->client == NULL || c->route == NULL)
		return;
	tables = dpwin_target_list_tables(c->client, c->route->target_database,
									  dpwin_invocation_table_prefix(c->route->route_id, &c->id));
	foreach(lc, tables)
		dpwin_target_drop_table(c->client, c->route->target_database, lfirst(lc));
}

/*
 * Recovery of an invocation left planned or extracting: we hold the lease,
 * so its coordinator is gone, and so is its snapshot.
 */
void
coordinator_expire_snapshot(Coordinator *c)
{
	coordinator_transition(c, DPWIN_STATE_SNAPSHOT_EXPIRED,
						   "the coordinator ended before extraction finished; its snapshot is gone",
						   unpack_sql_state(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE));
	coordinator_drop_own_tables(c);
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("invocation %s cannot be recovered: its snapshot expired before publication",
					dpwin_uuid_text(&c->id)),
			 errhint("Start a new invocation; it re-extracts the whole window.")));
}

/* ----------------------------------------------------------------
 *		the machine
 * ---------------------------------------------------------------- */

/*
 * Run the steps from the current state to a final one.  A step that
 * journals its state change itself, with what must commit with it (the
 * publication intent, evidence), leaves c->state at the next state; the
 * others are journaled here.
 */
static void
coordinator_run(Coordinator *c)
{
	while (!dpwin_state_is_final(c->state))
	{
		DpwinState	from = c->state;
		DpwinState	next;

		if (steps[from].run == NULL)
			elog(ERROR, "dpwin: no step for state %s", dpwin_state_name(from));
		if (c->progress_slot >= 0)
			dpwin_progress_phase(c->progress_slot, steps[from].phase);
		next = steps[from].run(c);
		if (next == from)
			elog(ERROR, "dpwin: step of state %s did not advance", dpwin_state_name(from));
		if (c->state != next)
			coordinator_transition(c, next, NULL, NULL);
	}

	/* Staging tables are not needed any more; backups stay. */
	coordinator_drop_own_tables(c);
}

/* ----------------------------------------------------------------
 *		entering the machine
 * ---------------------------------------------------------------- */

void
coordinator_load(Coordinator *c, int32 route_id)
{
	dpwin_xact_begin("dpwin: loading the route");
	MemoryContextSwitchTo(c->cxt);
	c->route = dpwin_route_load_by_id(route_id);
	dpwin_route_check_can_refresh(c->route);
	c->conf = dpwin_server_conf(c->route->server_name, GetUserId());
	c->target_id = dpwin_lease_target_id(c->route->server_name,
										 c->route->target_database,
										 c->route->target_table);
	dpwin_xact_commit(c->cxt);
	c->client = ch_client_open(c->conf, psprintf("dpwin-%s-", dpwin_uuid_text(&c->id)));
}

/*
 * The call's window, cut into chunks exactly as dpwin.plan() shows them,
 * and fresh digest keys: what a refresh and a verification start from.
 */
void
coordinator_plan_window(Coordinator *c)
{
	c->interval_end = c->call->interval_end;
	c->chunks = dpwin_window_chunks(c->interval_end, c->route->lookback_us,
									c->route->chunk_us);
	c->lo = ((DpwinChunkBounds *) linitial(c->chunks))->lo;
	c->hi = c->interval_end;
	dpwin_digest_key_generate(&c->key);
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

/*
 * A fresh refresh: take the lease, refuse while an older invocation of the
 * target has an unsettled publication, expire the orphans of dead
 * coordinators, and persist the immutable plan in state planned.
 */
static void
coordinator_register(Coordinator *c)
{
	DpwinInvocation inv = {0};
	char	   *older;
	List	   *orphans;

	coordinator_load(c, c->call->route_id);
	coordinator_take_lease(c);

	coordinator_plan_window(c);

	dpwin_xact_begin("dpwin: registering the invocation");
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
	inv.plan_fingerprint = dpwin_sha256_hex(inv.plan, strlen(inv.plan));
	inv.config_fingerprint = c->route->config_fingerprint;
	inv.lease_epoch = c->epoch;
	inv.caller_role = GetUserId();
	dpwin_registry_create(&inv, c->chunks);
	dpwin_xact_commit(c->cxt);
	c->registered = true;
	c->state = DPWIN_STATE_PLANNED;
	coordinator_drop_orphan_tables(c, orphans);
	c->progress_slot = dpwin_progress_claim(&c->id, c->route->route_id,
											list_length(c->chunks));
}

/* Columns of the chunk journal query of coordinator_recall(). */
#define Anum_chunk_chunk_no			1
#define Anum_chunk_state			2
#define Anum_chunk_staging_table	3
#define Anum_chunk_rows				4
#define Anum_chunk_bytes			5
#define Anum_chunk_digest			6
#define Anum_chunk_attempts			7
#define Anum_chunk_lo				8
#define Anum_chunk_hi				9

/* Rebuild what a coordinator knew from the journal and the plan. */
static DpwinInvocation *
coordinator_recall(Coordinator *c)
{
	DpwinInvocation *inv;
	Oid			types[1] = {UUIDOID};
	Datum		args[1] = {UUIDPGetDatum(&c->call->invocation_id)};
	char	   *key;

	dpwin_xact_begin("dpwin: reading the journal");
	MemoryContextSwitchTo(c->cxt);
	inv = dpwin_registry_load(&c->id, false);
	c->interval_end = inv->interval_end;
	c->lo = inv->window_lo;
	c->hi = inv->window_hi;
	c->state = inv->state;
	c->schema_fingerprint = inv->schema_fingerprint;
	c->registered = true;
	if (dpwin_catalog_exec("SELECT plan->>'digest_key' FROM dpwin.invocation WHERE invocation_id = $1",
						   1, types, args, NULL, true) == 1 &&
		(key = dpwin_catalog_text(0, 1)) != NULL)
		(void) dpwin_digest_key_from_text(key, &c->key);

	/* The chunk journal, for metrics and for publishing staged chunks. */
	c->nchunks = (int) dpwin_catalog_exec("SELECT chunk_no, state, staging_table, rows, bytes,"
										  " digest, attempt + 1, lo, hi"
										  " FROM dpwin.chunk WHERE invocation_id = $1 ORDER BY chunk_no",
										  1, types, args, NULL, true);
	/* SPI switched to its own context, which goes away at commit */
	MemoryContextSwitchTo(c->cxt);
	c->slots = palloc0(sizeof(DpwinChunkSlot) * Max(c->nchunks, 1));
	for (int i = 0; i < c->nchunks; i++)
	{
		DpwinChunkSlot *s = &c->slots[i];
		DpwinChunkBounds *bounds;
		bool		isnull;
		char	   *v;

		s->chunk_no = atoi(dpwin_catalog_text(i, Anum_chunk_chunk_no));
		v = dpwin_catalog_text(i, Anum_chunk_state);
		s->result = strcmp(v, "verified") == 0 ? DPWIN_CHUNK_VERIFIED :
			strcmp(v, "skipped") == 0 ? DPWIN_CHUNK_SKIPPED : DPWIN_CHUNK_FAILED;
		if ((v = dpwin_catalog_text(i, Anum_chunk_staging_table)) != NULL)
			strlcpy(s->staging_table, v, sizeof(s->staging_table));
		if ((v = dpwin_catalog_text(i, Anum_chunk_rows)) != NULL)
			s->rows = strtoull(v, NULL, 10);
		if ((v = dpwin_catalog_text(i, Anum_chunk_bytes)) != NULL)
			s->bytes = strtoull(v, NULL, 10);
		if ((v = dpwin_catalog_text(i, Anum_chunk_digest)) != NULL)
			(void) dpwin_digest_from_text(v, &s->digest);
		s->attempts = atoi(dpwin_catalog_text(i, Anum_chunk_attempts));
		s->lo = DatumGetTimestampTz(dpwin_catalog_value(i, Anum_chunk_lo, &isnull));
		s->hi = DatumGetTimestampTz(dpwin_catalog_value(i, Anum_chunk_hi, &isnull));
		bounds = palloc(sizeof(DpwinChunkBounds));
		bounds->chunk_no = s->chunk_no;
		bounds->lo = s->lo;
		bounds->hi = s->hi;
		c->chunks = lappend(c->chunks, bounds);
		if (s->result == DPWIN_CHUNK_VERIFIED)
		{
			dpwin_digest_merge(&c->staged_digest, &s->digest);
			c->encoded_bytes += s->bytes;
		}
		if (s->result == DPWIN_CHUNK_SKIPPED)
			c->skipped_chunks++;
		if (s->result != DPWIN_CHUNK_FAILED)
			dpwin_digest_merge(&c->source_digest, &s->digest);
	}
	c->source_rows = (int64) c->source_digest.count;
	c->staged_rows = (int64) c->staged_digest.count;
	dpwin_xact_commit(c->cxt);
	return inv;
}

/*
 * Recovery: the same machine, entered at the journaled state.  A completed
 * invocation only has its tables cleaned up; one that can no longer go on
 * says why.
 */
static void
coordinator_recover(Coordinator *c)
{
	DpwinInvocation *inv = coordinator_recall(c);

	c->recovering = true;
	if (inv->state == DPWIN_STATE_SNAPSHOT_EXPIRED)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("invocation %s cannot be recovered: its snapshot expired before publication",
						dpwin_uuid_text(&c->id)),
				 errhint("Start a new invocation; it re-extracts the whole window.")));
	if (dpwin_state_is_final(inv->state) && inv->state != DPWIN_STATE_COMPLETED)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("invocation %s is %s and has nothing to recover",
						dpwin_uuid_text(&c->id), dpwin_state_name(inv->state)),
				 errhint("Start a new invocation.")));

	coordinator_load(c, inv->route_id);
	if (inv->state != DPWIN_STATE_COMPLETED)
	{
		coordinator_take_lease(c);
		c->progress_slot = dpwin_progress_claim(&c->id, c->route->route_id, c->nchunks);
	}
	coordinator_run(c);
}

static void
coordinator_abandon(Coordinator *c)
{
	DpwinInvocation *inv = coordinator_recall(c);
	DpwinPublication *pub;

	dpwin_xact_begin("dpwin: reading the publication intent");
	MemoryContextSwitchTo(c->cxt);
	pub = dpwin_publication_load(&c->id);
	dpwin_xact_commit(c->cxt);
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
	coordinator_drop_own_tables(c);
	if (inv->state != DPWIN_STATE_SNAPSHOT_EXPIRED)
		coordinator_transition(c, DPWIN_STATE_ABANDONED, "abandoned by request", NULL);
}

/* ----------------------------------------------------------------
 *		failure
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
				coordinator_record_outcome(c, DPWIN_OUTCOME_NOT_PUBLISHED);
			coordinator_transition(c, DPWIN_STATE_FAILED, edata->message,
								   unpack_sql_state(edata->sqlerrcode));
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
			coordinator_drop_own_tables(c);
		}
		PG_CATCH();
		{
			EmitErrorReport();
			FlushErrorState();
		}
		PG_END_TRY();
	}
}


/* ----------------------------------------------------------------
 *		the coordinator process
 * ---------------------------------------------------------------- */

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
	/* the caller's settings, as it set them in its session */
	dpwin_lease_timeout_ms = call->lease_timeout_ms;
	dpwin_max_workers = call->max_workers;
	dpwin_retry_backoff_ms = call->retry_backoff_ms;

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
				coordinator_register(&c);
				coordinator_run(&c);
				break;
			case DPWIN_CALL_RECOVER:
				coordinator_recover(&c);
				break;
			case DPWIN_CALL_ABANDON:
				coordinator_abandon(&c);
				break;
			case DPWIN_CALL_VERIFY:
				coordinator_verify(&c);
				break;
		}
		if (call->mode != DPWIN_CALL_VERIFY)
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

