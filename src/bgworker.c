/*-------------------------------------------------------------------------
 *
 * bgworker.c
 *	  Connecting, launching, waiting for and running transactions in dpwin
 *	  background workers: one helper for each idiom (docs/design.md,
 *	  "Architecture").
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "bgworker.h"

/*
 * The caller's current role is often a group role without LOGIN, reached
 * with SET ROLE, and BackgroundWorkerInitializeConnectionByOid() refuses
 * such a role.  So a dpwin worker logs in as the caller's login role,
 * which could log in, and then takes the caller's current role exactly as
 * SET ROLE does: every privilege check sees that role.
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

BackgroundWorkerHandle *
dpwin_bgworker_launch(const char *function_name, const char *name,
					  const char *type, Datum main_arg)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	pid_t		pid;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "dpwin");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "%s", function_name);
	snprintf(worker.bgw_name, BGW_MAXLEN, "%s", name);
	snprintf(worker.bgw_type, BGW_MAXLEN, "%s", type);
	worker.bgw_main_arg = main_arg;
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		return NULL;

	/*
	 * A worker that already ran and stopped is fine; one that could not be
	 * started at all (the postmaster ran out of processes) is not.
	 */
	switch (WaitForBackgroundWorkerStartup(handle, &pid))
	{
		case BGWH_STARTED:
		case BGWH_STOPPED:
			break;
		case BGWH_POSTMASTER_DIED:
			ereport(ERROR,
					(errcode(ERRCODE_ADMIN_SHUTDOWN),
					 errmsg("postmaster died while starting %s", name)));
			break;
		case BGWH_NOT_YET_STARTED:
			return NULL;
	}
	return handle;
}

void
dpwin_bgworker_wait_all(BackgroundWorkerHandle **handles, int n,
						pg_atomic_uint32 *finished)
{
	for (;;)
	{
		bool		running = false;

		/*
		 * A worker that is done only has to exit, which takes the postmaster
		 * and the kernel some milliseconds more: what the waiter reads next
		 * (the results the workers wrote before counting themselves) is
		 * already there.
		 */
		if (finished != NULL && pg_atomic_read_u32(finished) >= (uint32) n)
		{
			pg_memory_barrier();
			break;
		}

		for (int i = 0; i < n; i++)
		{
			pid_t		pid;

			if (handles[i] == NULL)
				continue;
			switch (GetBackgroundWorkerPid(handles[i], &pid))
			{
				case BGWH_STARTED:
				case BGWH_NOT_YET_STARTED:
					running = true;
					break;
				case BGWH_POSTMASTER_DIED:
					ereport(ERROR,
							(errcode(ERRCODE_ADMIN_SHUTDOWN),
							 errmsg("postmaster died while dpwin workers were running")));
					break;
				case BGWH_STOPPED:
					break;
			}
		}
		if (!running)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1000, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

void
dpwin_bgworker_stop_all(BackgroundWorkerHandle **handles, int n)
{
	for (int i = 0; i < n; i++)
		if (handles[i])
			TerminateBackgroundWorker(handles[i]);
	for (int i = 0; i < n; i++)
		if (handles[i])
			(void) WaitForBackgroundWorkerShutdown(handles[i]);
}

/*
 * As worker_spi does around each of its transactions: the statement start
 * time and the activity shown in pg_stat_activity are those of this unit
 * of work, not of the worker's first.
 */
void
dpwin_xact_begin(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

void
dpwin_xact_commit(MemoryContext cxt)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	MemoryContextSwitchTo(cxt);
}

void
dpwin_sleep_ms(long ms)
{
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);
	long		left;

	while ((left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), until)) > 0)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 left, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}
