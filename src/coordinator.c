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
 *	  A rollback is registered in verified, where its own step checks the
 *	  kept backup it puts back; from publishing on it is a refresh.
 *
 *	  One step function per state (steps.h: stage.c, publish.c, finish.c)
 *	  does that state's work and returns the next state with what must
 *	  commit with it; coordinator_run() calls them in turn and hands each
 *	  result to dpwin_invocation_transition(), the one writer of the state,
 *	  which checks the legal predecessor.  A refresh registers its
 *	  invocation and enters at planned; recovery loads the journal and
 *	  enters the same loop at the state it records, so that no step exists
 *	  twice.  Abandonment is not a step: it only ends an invocation that
 *	  never published.  This file alone knows every step; the steps know
 *	  the invocation (invocation.c), extraction (extraction.c) and the
 *	  generation (build.c), and none of them calls back here.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "bgworker.h"
#include "chprobe.h"
#include "coordinator.h"
#include "lease.h"
#include "names.h"
#include "progress.h"
#include "retention.h"
#include "rollback.h"
#include "steps.h"
#include "verify.h"
#include "window.h"

/* The step of each state that is not final. */
typedef struct CoordinatorStep
{
	const char *phase;			/* as dpwin.progress shows it */
	DpwinStepResult (*run) (Coordinator *c);
} CoordinatorStep;

static const CoordinatorStep steps[DPWIN_NSTATES] = {
	[DPWIN_STATE_PLANNED] = {"admission", dpwin_step_planned},
	[DPWIN_STATE_EXTRACTING] = {"extracting", dpwin_step_extracting},
	[DPWIN_STATE_STAGED] = {"staged", dpwin_step_staged},
	[DPWIN_STATE_VERIFIED] = {"building", dpwin_step_verified},
	[DPWIN_STATE_PUBLISHING] = {"publishing", dpwin_step_publishing},
	[DPWIN_STATE_UNKNOWN] = {"publishing", dpwin_step_publishing},
	[DPWIN_STATE_PUBLISHED] = {"evidence", dpwin_step_published},
	[DPWIN_STATE_EVIDENCED] = {"completing", dpwin_step_evidenced},
};

/*
 * A rollback's own step, in the state where a refresh builds its
 * generation (docs/design.md, "Rolling back a generation"); every other
 * step of a rollback is the refresh's.
 */
static const CoordinatorStep rollback_step = {"rollback", dpwin_step_rollback};

pg_noreturn static void report_snapshot_expired(Coordinator *c);

static void
report_snapshot_expired(Coordinator *c)
{
	ereport(ERROR,
			(errcode(DPWIN_SNAPSHOT_GONE_ERRCODE),
			 errmsg("invocation %s cannot be recovered: its snapshot expired before publication",
					dpwin_uuid_text(&c->id)),
			 errhint("Start a new invocation; it re-extracts the whole window.")));
}

/*
 * Recovery of an invocation left planned or extracting: we hold the lease,
 * so its coordinator is gone, and so is its snapshot.
 */
pg_noreturn static void expire_snapshot(Coordinator *c);

static void
expire_snapshot(Coordinator *c)
{
	dpwin_invocation_transition(c, DPWIN_STATE_SNAPSHOT_EXPIRED, NULL,
								DPWIN_SNAPSHOT_GONE, DPWIN_SNAPSHOT_GONE_ERRCODE);
	dpwin_invocation_drop_own_tables(c);
	report_snapshot_expired(c);
}

/* ----------------------------------------------------------------
 *		the machine
 * ---------------------------------------------------------------- */

/*
 * The clean-up of an invocation in a final state.  What it settled stays
 * settled if ClickHouse refuses the DROP: the caller gets the invocation's
 * row and a warning that says how to drop what is left.
 */
static void
clean_up_final(Coordinator *c)
{
	PG_TRY();
	{
		dpwin_invocation_drop_own_tables(c);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(c->cxt);
		edata = CopyErrorData();
		FlushErrorState();
		snprintf(c->call->message, sizeof(c->call->message),
				 "staging tables of invocation %s were not dropped: %s",
				 dpwin_uuid_text(&c->id), edata->message);
		snprintf(c->call->hint, sizeof(c->call->hint),
				 "SELECT * FROM dpwin.recover('%s') drops them.",
				 dpwin_uuid_text(&c->id));
		ereport(WARNING,
				(errcode(edata->sqlerrcode),
				 errmsg("%s", c->call->message),
				 errhint("%s", c->call->hint)));
		FreeErrorData(edata);
	}
	PG_END_TRY();
}

/*
 * Run the steps from the current state to a final one, journaling each
 * step's change of state with what the step says must commit with it
 * (what admission learned, the snapshot, the publication intent and
 * outcome, evidence, the route's state).
 */
static void
coordinator_run(Coordinator *c)
{
	while (!dpwin_registry_state_is_final(c->state))
	{
		DpwinState	from = c->state;
		const CoordinatorStep *step = &steps[from];
		DpwinStepResult result;

		if (c->kind == DPWIN_KIND_ROLLBACK && from == DPWIN_STATE_VERIFIED)
			step = &rollback_step;
		if (step->run == NULL)
			elog(ERROR, "dpwin: no step for state %s", dpwin_registry_state_name(from));
		if (c->progress_slot >= 0)
			dpwin_progress_phase(c->progress_slot, step->phase);
		result = step->run(c);
		if (result.next == from)
			elog(ERROR, "dpwin: step of state %s did not advance", dpwin_registry_state_name(from));
		dpwin_invocation_transition(c, result.next, result.with, NULL, 0);
	}

	/* Staging tables are not needed any more; backups stay. */
	clean_up_final(c);
}

/* ----------------------------------------------------------------
 *		entering the machine
 * ---------------------------------------------------------------- */

static void
coordinator_take_lease(Coordinator *c)
{
	c->epoch = dpwin_lease_acquire(c->target_id, &c->id);
	c->lease_held = true;
	MemoryContextSwitchTo(c->cxt);
}

/*
 * Drop the tables of the orphans that registration expired (best effort:
 * abandon() also does it).  Their staging tables can never be published,
 * and recover() of such an invocation would drop them: the invocation that
 * expires them drops them too, so that none is left for the DBA to find.
 */
static void
coordinator_drop_orphan_tables(Coordinator *c, List *orphans)
{
	ListCell   *lc;

	foreach(lc, orphans)
	{
		DpwinOrphan *o = lfirst(lc);

		PG_TRY();
		{
			List	   *tables = dpwin_target_list_tables(c->client,
														  c->route->target_database,
														  dpwin_invocation_table_prefix(o->route_id, &o->id));
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
 * A fresh refresh or rollback: take the lease, register the invocation in
 * state planned (a rollback, which chose its backup under the lease, in
 * verified), which refuses while an older invocation of the target has an
 * unsettled publication, and expires the orphans of dead coordinators,
 * and drop the orphans' tables.
 */
static void
coordinator_register(Coordinator *c)
{
	List	   *orphans;

	dpwin_invocation_load(c, c->call->route_id);
	coordinator_take_lease(c);
	if (c->call->mode == DPWIN_CALL_ROLLBACK)
	{
		TimestampTz interval_end;
		char	   *backup = dpwin_rollback_choose(c, &interval_end);

		dpwin_invocation_plan_rollback(c, backup, interval_end);
	}
	else
	{
		dpwin_invocation_plan_window(c);
		dpwin_invocation_adopt_digest_cache(c);
	}
	orphans = dpwin_invocation_register(c);
	coordinator_drop_orphan_tables(c, orphans);
	c->progress_slot = dpwin_progress_claim(&c->id, c->route->route_id,
											list_length(c->ext.chunks));
}

/*
 * Recovery: the same machine, entered at the journaled state.  A completed
 * invocation only has its tables cleaned up; one that can no longer go on
 * says why.
 */
static void
coordinator_recover(Coordinator *c)
{
	DpwinInvocation *inv = dpwin_invocation_recall(c);

	c->recovering = true;
	if (inv->state == DPWIN_STATE_SNAPSHOT_EXPIRED)
		report_snapshot_expired(c);
	if (dpwin_registry_state_is_final(inv->state) && inv->state != DPWIN_STATE_COMPLETED)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("invocation %s is %s and has nothing to recover",
						dpwin_uuid_text(&c->id), dpwin_registry_state_name(inv->state)),
				 errhint("Start a new invocation.")));

	dpwin_invocation_load(c, inv->route_id);
	if (inv->state != DPWIN_STATE_COMPLETED)
	{
		coordinator_take_lease(c);
		c->progress_slot = dpwin_progress_claim(&c->id, c->route->route_id,
												c->ext.nchunks);
	}
	if (c->state == DPWIN_STATE_PLANNED || c->state == DPWIN_STATE_EXTRACTING)
		expire_snapshot(c);
	coordinator_run(c);
}

static void
coordinator_abandon(Coordinator *c)
{
	DpwinInvocation *inv = dpwin_invocation_recall(c);
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

	dpwin_invocation_load(c, inv->route_id);
	coordinator_take_lease(c);
	dpwin_invocation_drop_own_tables(c);
	if (inv->state != DPWIN_STATE_SNAPSHOT_EXPIRED)
		dpwin_invocation_transition(c, DPWIN_STATE_ABANDONED, NULL,
									"abandoned by request", 0);
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
	ChHttpStatus status;

	if (c->client == NULL || c->route == NULL)
		return;
	status = dpwin_chprobe_settle(c->client,
								  dpwin_invocation_table_prefix(c->route->route_id, &c->id));
	if (status != CHHTTP_OK)
		ereport(LOG,
				(errmsg("dpwin: could not settle the statements of invocation %s: %s",
						dpwin_uuid_text(&c->id), dpwin_chhttp_status_name(status))));
}

/*
 * The exchange's outcome is unknown: kept in the journal, with every
 * table, for a human to settle.  Recovery of an unknown publication may
 * find it unknown again.
 */
static void
journal_unknown(Coordinator *c)
{
	if (c->state != DPWIN_STATE_UNKNOWN)
		dpwin_invocation_transition(c, DPWIN_STATE_UNKNOWN,
									dpwin_invocation_record_outcome,
									"publication outcome unknown",
									ERRCODE_TRANSACTION_RESOLUTION_UNKNOWN);
	else
	{
		dpwin_xact_begin("dpwin: publication outcome");
		dpwin_invocation_record_outcome(c);
		dpwin_xact_commit(c->cxt);
	}
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
	DpwinOutcome outcome = c->build.outcome;
	bool		prepublication = (c->state < DPWIN_STATE_PUBLISHING ||
								  ((c->state == DPWIN_STATE_PUBLISHING || c->state == DPWIN_STATE_UNKNOWN) &&
								   outcome == DPWIN_OUTCOME_NOT_PUBLISHED));

	call_set_error(c->call, edata);
	if (!c->registered)
		return;

	/*
	 * Data may be visible already: tell the caller how to finish, first,
	 * before any hint of the error itself (a server that did not answer
	 * in time has one).  An invocation that could not take the lease keeps
	 * the lease's own hint: waiting for the holder is what settles it.
	 */
	if (!prepublication && !dpwin_registry_state_is_final(c->state) &&
		(c->lease_held || c->call->hint[0] == '\0'))
	{
		char		own[sizeof(c->call->hint)];

		strlcpy(own, c->call->hint, sizeof(own));
		snprintf(c->call->hint, sizeof(c->call->hint),
				 "The invocation is %s; SELECT * FROM dpwin.recover('%s') settles it.%s%s",
				 dpwin_registry_state_name(c->state), dpwin_uuid_text(&c->id),
				 own[0] != '\0' ? " " : "", own);
	}

	PG_TRY();
	{
		if (prepublication && c->lease_held)
		{
			/* settled: no longer blocks fresh invocations of the target */
			dpwin_invocation_transition(c, DPWIN_STATE_FAILED,
										outcome == DPWIN_OUTCOME_NOT_PUBLISHED ?
										dpwin_invocation_record_outcome : NULL,
										edata->message, edata->sqlerrcode);
		}
		else if (outcome == DPWIN_OUTCOME_UNKNOWN && c->lease_held)
			journal_unknown(c);
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
	 * coordinator (a refused recover() or abandon()): its tables are not ours
	 * to drop.
	 */
	if (prepublication && c->lease_held)
	{
		PG_TRY();
		{
			coordinator_settle_statements(c);
			dpwin_invocation_drop_own_tables(c);
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
 *		retention
 * ---------------------------------------------------------------- */

/*
 * The backups to drop after a completed publication, read under the lease
 * (no other invocation of the target can write an intent meanwhile).  A
 * failure here changes nothing published: it is logged, and the next
 * publication decides again.
 */
static List *
coordinator_retention_plan(Coordinator *c)
{
	List	   *tables = NIL;

	if (c->state != DPWIN_STATE_COMPLETED || c->route == NULL || !c->lease_held ||
		(c->call->mode != DPWIN_CALL_REFRESH && c->call->mode != DPWIN_CALL_RECOVER))
		return NIL;
	PG_TRY();
	{
		dpwin_xact_begin("dpwin: retention");
		MemoryContextSwitchTo(c->cxt);
		tables = dpwin_retention_plan(c->route->route_id);
		dpwin_xact_commit(c->cxt);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(c->cxt);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		tables = NIL;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(c->cxt);
	return tables;
}

/* Drop them and journal it, once the caller has its result. */
static void
coordinator_retention_apply(Coordinator *c, List *tables)
{
	PG_TRY();
	{
		dpwin_retention_drop(c->client, c->route->target_database, tables);
		dpwin_xact_begin("dpwin: retention");
		dpwin_retention_mark_dropped(c->route->route_id, tables);
		dpwin_xact_commit(c->cxt);
		ereport(DEBUG1,
				(errmsg("dpwin: route %d: dropped %d backups after invocation %s",
						c->route->route_id, list_length(tables), dpwin_uuid_text(&c->id))));
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(c->cxt);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(c->cxt);
}

/*
 * The outcome is in the segment: let the caller return before this process
 * has exited.
 */
static void
coordinator_release_caller(DpwinCallShared *call)
{
	PGPROC	   *caller;

	call->finished = true;
	pg_write_barrier();
	call->released = true;
	caller = BackendPidGetProc(call->caller_pid);
	if (caller != NULL)
		SetLatch(&caller->procLatch);
}

/* ----------------------------------------------------------------
 *		the coordinator process
 * ---------------------------------------------------------------- */

void
dpwin_coordinator_main(Datum main_arg)
{
	dsm_segment *seg;
	DpwinCallShared *call;
	Coordinator c;
	List	   *retention;

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

	dpwin_invocation_init(&c, call);
	/* the caller's settings, as it set them in its session */
	dpwin_lease_timeout_ms = call->lease_timeout_ms;
	dpwin_max_workers = call->max_workers;
	dpwin_retry_backoff_ms = call->retry_backoff_ms;

	/*
	 * The journal must survive a crash of this server before dpwin acts on
	 * what it says: the publication intent is committed before the EXCHANGE,
	 * and an asynchronous commit lost in a crash would leave an exchanged
	 * target with no intent to reconcile it by.
	 */
	if (synchronous_commit == SYNCHRONOUS_COMMIT_OFF)
		SetConfigOption("synchronous_commit", "local", PGC_USERSET, PGC_S_OVERRIDE);
	MemoryContextSwitchTo(c.cxt);

	PG_TRY();
	{
		switch (call->mode)
		{
			case DPWIN_CALL_REFRESH:
			case DPWIN_CALL_ROLLBACK:
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
				dpwin_verify_run(&c);
				break;
		}
		if (call->mode != DPWIN_CALL_VERIFY)
			dpwin_invocation_fill_result(&c);
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
		dpwin_invocation_fill_result(&c);
		RESUME_INTERRUPTS();
	}
	PG_END_TRY();

	retention = coordinator_retention_plan(&c);
	if (c.lease_held)
		dpwin_lease_release(c.target_id);
	if (c.progress_slot >= 0)
		dpwin_progress_release(c.progress_slot);

	/*
	 * The caller has its result before the backups are dropped: retention is
	 * not on its path, and works without the lease, on tables that only this
	 * route's journal names and that no unfinished publication needs.
	 * Otherwise the caller returns once this process has exited, as it
	 * always did.
	 */
	if (retention != NIL)
	{
		coordinator_release_caller(call);
		coordinator_retention_apply(&c, retention);
	}
	if (c.client)
		dpwin_ch_client_close(c.client);
	if (c.second_client)
		dpwin_ch_client_close(c.second_client);
	if (retention == NIL)
		call->finished = true;
	dsm_detach(seg);
	proc_exit(0);
}
