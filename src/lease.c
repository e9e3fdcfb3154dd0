/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  The target lease and its fencing epoch.
 *
 *	  The lock is a session-level advisory lock in dpwin's own key space:
 *	  the two-int form with DPWIN_LOCK_CLASS as the first key and the
 *	  target's id as the second.  A DBA or another job can hold the same
 *	  guard from psql with dpwin.lock_target() or with
 *	  pg_advisory_lock(class, target_id).  The lock alone does not fence a
 *	  runner that was paused and resumes after losing it, so every journal
 *	  write also compares the epoch it was granted with the current one.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "catalog.h"
#include "lease.h"

static void
lease_locktag(LOCKTAG *tag, int32 target_id)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) DPWIN_LOCK_CLASS,
						 (uint32) target_id, 2);
}

int32
dpwin_lease_target_id(const char *server_name, const char *database,
					  const char *table)
{
	Oid			types[3] = {NAMEOID, TEXTOID, TEXTOID};
	Datum		args[3];
	bool		isnull;

	args[0] = DirectFunctionCall1(namein, CStringGetDatum(server_name));
	args[1] = CStringGetTextDatum(database);
	args[2] = CStringGetTextDatum(table);

	dpwin_catalog_exec("INSERT INTO dpwin.lease (server_name, target_database, target_table)"
					   " VALUES ($1, $2, $3)"
					   " ON CONFLICT (server_name, target_database, target_table) DO NOTHING",
					   3, types, args, NULL, false);
	if (dpwin_catalog_exec("SELECT target_id FROM dpwin.lease"
						   " WHERE server_name = $1 AND target_database = $2 AND target_table = $3",
						   3, types, args, NULL, false) != 1)
		elog(ERROR, "dpwin.lease row of target vanished");
	return DatumGetInt32(dpwin_catalog_value(0, 1, &isnull));
}

/* Who holds the target's lease, for the error message. */
static char *
lease_holder_text(int32 target_id)
{
	Oid			types[1] = {INT4OID};
	Datum		args[1] = {Int32GetDatum(target_id)};
	char	   *pid;
	char	   *inv;

	if (dpwin_catalog_exec("SELECT holder_pid, holder_invocation, server_name,"
						   " target_database, target_table"
						   " FROM dpwin.lease WHERE target_id = $1",
						   1, types, args, NULL, true) != 1)
		return pstrdup("unknown");
	pid = dpwin_catalog_text(0, 1);
	inv = dpwin_catalog_text(0, 2);
	return psprintf("process %s running invocation %s",
					pid ? pid : "?", inv ? inv : "?");
}

int64
dpwin_lease_acquire(int32 target_id, const pg_uuid_t *holder)
{
	LOCKTAG		tag;
	TimestampTz deadline;
	int64		epoch;
	Oid			types[3] = {INT4OID, INT4OID, UUIDOID};
	Datum		args[3];
	bool		isnull;

	lease_locktag(&tag, target_id);
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   dpwin_lease_timeout_ms);
	for (;;)
	{
		if (LockAcquire(&tag, ExclusiveLock, true, true) != LOCKACQUIRE_NOT_AVAIL)
			break;
		if (GetCurrentTimestamp() >= deadline)
		{
			char	   *holder_text;

			StartTransactionCommand();
			SPI_connect();
			PushActiveSnapshot(GetTransactionSnapshot());
			holder_text = lease_holder_text(target_id);
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("the target of this route is leased by another dpwin invocation"),
					 errdetail("The lease (advisory lock %d, %d) is held by %s.",
							   DPWIN_LOCK_CLASS, target_id, holder_text),
					 errhint("Wait for it to finish, or set dpwin.lease_timeout to wait for the lease.")));
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 100, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}

	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	args[0] = Int32GetDatum(target_id);
	args[1] = Int32GetDatum(MyProcPid);
	args[2] = UUIDPGetDatum(holder);
	if (dpwin_catalog_exec("UPDATE dpwin.lease SET epoch = epoch + 1,"
						   " holder_pid = $2, holder_invocation = $3,"
						   " acquired_at = clock_timestamp()"
						   " WHERE target_id = $1 RETURNING epoch",
						   3, types, args, NULL, false) != 1)
		elog(ERROR, "dpwin.lease row %d is missing", target_id);
	epoch = DatumGetInt64(dpwin_catalog_value(0, 1, &isnull));
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	return epoch;
}

void
dpwin_lease_release(int32 target_id)
{
	LOCKTAG		tag;

	lease_locktag(&tag, target_id);
	if (!dpwin_lease_held(target_id))
		return;

	/* Clear the holder first, while the lock still excludes others. */
	PG_TRY();
	{
		Oid			types[2] = {INT4OID, INT4OID};
		Datum		args[2] = {Int32GetDatum(target_id), Int32GetDatum(MyProcPid)};

		StartTransactionCommand();
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		dpwin_catalog_exec("UPDATE dpwin.lease SET holder_pid = NULL,"
						   " holder_invocation = NULL"
						   " WHERE target_id = $1 AND holder_pid = $2",
						   2, types, args, NULL, false);
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		/* The lock is what excludes; a stale holder column is harmless. */
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();

	LockRelease(&tag, ExclusiveLock, true);
}

bool
dpwin_lease_held(int32 target_id)
{
	LOCKTAG		tag;

	lease_locktag(&tag, target_id);
	return LockHeldByMe(&tag, ExclusiveLock);
}

void
dpwin_lease_check_epoch(int32 target_id, int64 epoch)
{
	Oid			types[1] = {INT4OID};
	Datum		args[1] = {Int32GetDatum(target_id)};
	bool		isnull;
	int64		current;

	if (dpwin_catalog_exec("SELECT epoch FROM dpwin.lease WHERE target_id = $1 FOR SHARE",
						   1, types, args, NULL, false) != 1)
		elog(ERROR, "dpwin.lease row %d is missing", target_id);
	current = DatumGetInt64(dpwin_catalog_value(0, 1, &isnull));
	if (current != epoch)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("fenced: this runner's lease epoch %lld of target %d is stale",
						(long long) epoch, target_id),
				 errdetail("The target's current epoch is %lld: another runner took the lease.",
						   (long long) current)));
}
