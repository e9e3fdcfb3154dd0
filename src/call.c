/*-------------------------------------------------------------------------
 *
 * call.c
 *	  The caller's side of a coordinator: launch it with the call in a
 *	  dynamic shared memory segment, wait for it while staying
 *	  cancellable, turn its outcome into the caller's error or result row.
 *
 *	  Running the work in a background worker gives it transactions of its
 *	  own: journal writes commit independently of the caller's transaction
 *	  and survive the caller's cancellation, and the exported snapshot's
 *	  transaction is not the caller's.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "bgworker.h"
#include "call.h"
#include "registry.h"

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
	BackgroundWorkerHandle *handle;
	BgwHandleStatus status;
	pid_t		pid;

	seg = dsm_create(sizeof(DpwinCallShared), 0);
	shared = dsm_segment_address(seg);
	memcpy(shared, call, sizeof(DpwinCallShared));
	shared->magic = DPWIN_CALL_MAGIC;
	shared->finished = false;
	shared->sqlerrcode = 0;

	handle = dpwin_bgworker_launch("dpwin_coordinator_main",
								   psprintf("dpwin coordinator %s",
											dpwin_uuid_text(&call->invocation_id)),
								   "dpwin coordinator",
								   UInt32GetDatum(dsm_segment_handle(seg)));
	if (handle == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start a dpwin coordinator: no free background worker slot"),
				 errhint("Raise max_worker_processes (each refresh needs one coordinator plus its route's parallelism).")));

	PG_ENSURE_ERROR_CLEANUP(caller_cleanup, PointerGetDatum(handle));
	{
		for (;;)
		{
			/*
			 * A coordinator that drops backups after the outcome releases its
			 * caller first: retention is not the caller's to wait for.
			 */
			if (shared->released)
			{
				pg_read_barrier();
				break;
			}
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

	/* a coordinator lost without an outcome, as for a lost parallel worker */
	if (!call->finished)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
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

	/* settled, with something left for the caller to do */
	if (call->message[0] != '\0')
		ereport(WARNING,
				(errmsg("%s", call->message),
				 call->hint[0] ? errhint("%s", call->hint) : 0));
}

/*
 * The details of a completed call: the result the coordinator journaled
 * with the completion, which the shared segment may hold only in part
 * (evidence with many chunks); the segment's copy when the registry row is
 * not visible to this transaction's snapshot.
 */
static Datum
call_details(const DpwinCallShared *call)
{
	char	   *details;
	MemoryContext cxt = CurrentMemoryContext;

	SPI_connect();
	details = dpwin_registry_result(&call->invocation_id);
	if (details != NULL)
		details = MemoryContextStrdup(cxt, details);
	SPI_finish();
	return DirectFunctionCall1(jsonb_in,
							   CStringGetDatum(details ? details : call->details));
}

/* The result row of dpwin_refresh(), dpwin.recover() and dpwin.abandon(). */
Datum
dpwin_call_result(FunctionCallInfo fcinfo, const DpwinCallShared *call)
{
	TupleDesc	tupdesc;
	Datum		values[11];
	bool		nulls[11] = {0};
	pg_uuid_t  *id = palloc(sizeof(pg_uuid_t));

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);

	*id = call->invocation_id;
	values[0] = UUIDPGetDatum(id);
	values[1] = CStringGetTextDatum(call->state);
	values[2] = TimestampTzGetDatum(call->window_lo);
	values[3] = TimestampTzGetDatum(call->window_hi);
	values[4] = Int32GetDatum(call->chunks);
	values[5] = Int64GetDatum(call->source_rows);
	values[6] = Int64GetDatum(call->staged_rows);
	values[7] = Int64GetDatum(call->final_rows);
	if (call->generation_table[0])
		values[8] = CStringGetTextDatum(call->generation_table);
	else
		nulls[8] = true;
	if (call->backup_table[0])
		values[9] = CStringGetTextDatum(call->backup_table);
	else
		nulls[9] = true;
	if (call->details[0])
		values[10] = call_details(call);
	else
		nulls[10] = true;
	return HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
}

void
dpwin_call_init(DpwinCallShared *call, DpwinCallMode mode)
{
	memset(call, 0, sizeof(*call));
	call->mode = mode;
	call->database_id = MyDatabaseId;
	call->user_id = GetUserId();
	call->login_user_id = GetAuthenticatedUserId();
	call->lease_timeout_ms = dpwin_lease_timeout_ms;
	call->max_workers = dpwin_max_workers;
	call->retry_backoff_ms = dpwin_retry_backoff_ms;
	call->caller_pid = MyProcPid;
}
