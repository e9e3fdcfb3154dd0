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
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "catalog.h"
#include "lease.h"

/*
 * The column of the one-column results of the dpwin.lease queries below
 * ("SELECT target_id", "RETURNING epoch", "SELECT epoch").
 */
#define Anum_lease_target_id	1
#define Anum_lease_epoch		1

/*
 * Columns of lease_holder_text()'s query; every one may be NULL (outer
 * joins, and a lease no runner has recorded itself in).
 */
#define Anum_holder_lock_pid		1
#define Anum_holder_backend_type	2
#define Anum_holder_application		3
#define Anum_holder_holder_pid		4
#define Anum_holder_invocation		5

static bool lease_held(int32 target_id);


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
	return DatumGetInt32(dpwin_catalog_not_null(Anum_lease_target_id, "lease"));
}

/* How often lease_holder_text() looks again, 10 ms apart, for a runner's record. */
#define LEASE_HOLDER_LOOKS	100

/*
 * Who holds the target's lease, for the error message.  The lock table
 * says which process holds it; dpwin.lease can only say which invocation,
 * and only for a dpwin runner: a session that took the guard with
 * dpwin.lock_target() or pg_advisory_lock() leaves no trace there, and a
 * runner that died leaves stale holder columns behind.  So the lock is
 * asked first and the holder columns are believed only when they name the
 * same process.  Needs a transaction with SPI connected.
 */
static char *
lease_holder_text(int32 target_id)
{
	Oid			types[2] = {INT4OID, OIDOID};
	Datum		args[2] = {Int32GetDatum(target_id), ObjectIdGetDatum(MyDatabaseId)};
	char	   *pid;
	char	   *backend_type;
	char	   *appname;
	char	   *holder_pid;
	char	   *inv;
	int			looks = 0;

	/*
	 * A runner records itself in dpwin.lease right after taking the lock, and
	 * a runner that loses a race for the lease by a moment looks before the
	 * winner's record is committed: look again for a little while (each look
	 * with a fresh snapshot) so that the winner's invocation is named.
	 */
look_again:
	if (dpwin_catalog_exec(psprintf("SELECT l.pid, a.backend_type, a.application_name,"
									" e.holder_pid, e.holder_invocation"
									" FROM dpwin.lease e"
									" LEFT JOIN pg_catalog.pg_locks l"
									"   ON l.locktype = 'advisory' AND l.database = $2"
									"  AND l.classid = '%u'::pg_catalog.oid"
									"  AND l.objid = e.target_id::pg_catalog.oid"
									"  AND l.objsubid = 2 AND l.granted"
									" LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid"
									" WHERE e.target_id = $1"
									" ORDER BY l.pid LIMIT 1",
									(uint32) DPWIN_LOCK_CLASS),
						   2, types, args, NULL, false) != 1)
		return pstrdup("an unknown process");
	pid = dpwin_catalog_text(0, Anum_holder_lock_pid);
	backend_type = dpwin_catalog_text(0, Anum_holder_backend_type);
	appname = dpwin_catalog_text(0, Anum_holder_application);
	holder_pid = dpwin_catalog_text(0, Anum_holder_holder_pid);
	inv = dpwin_catalog_text(0, Anum_holder_invocation);

	/* Released between our attempt and this look: say so, and retry helps. */
	if (pid == NULL)
		return pstrdup("a process that released it a moment ago");
	if (holder_pid && inv && strcmp(pid, holder_pid) == 0)
		return psprintf("process %s (%s) running invocation %s",
						pid, backend_type ? backend_type : "?", inv);
	/* a runner between taking the lock and recording itself */
	if (backend_type && strcmp(backend_type, "dpwin coordinator") == 0)
	{
		if (looks++ < LEASE_HOLDER_LOOKS)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 10, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			/* pg_stat_activity is otherwise read once per transaction */
			pgstat_clear_backend_activity_snapshot();
			goto look_again;
		}
		return psprintf("process %s (%s) starting an invocation", pid, backend_type);
	}
	return psprintf("process %s (%s%s%s%s), outside any dpwin invocation: "
					"a session holding dpwin.lock_target() or pg_advisory_lock(%d, %d)",
					pid, backend_type ? backend_type : "?",
					appname && appname[0] ? ", application \"" : "",
					appname && appname[0] ? appname : "",
					appname && appname[0] ? "\"" : "",
					DPWIN_LOCK_CLASS, target_id);
}

/*
 * Take the target's advisory lock for this session, retrying until
 * dpwin.lease_timeout has passed.  false when another process still holds
 * it.  The lock is polled rather than waited for in the lock manager so
 * that the timeout is dpwin's own and a cancel is seen at once.
 */
static bool
lease_lock_wait(int32 target_id)
{
	LOCKTAG		tag;
	TimestampTz deadline;

	lease_locktag(&tag, target_id);
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   dpwin_lease_timeout_ms);
	for (;;)
	{
		if (LockAcquire(&tag, ExclusiveLock, true, true) != LOCKACQUIRE_NOT_AVAIL)
			return true;
		if (GetCurrentTimestamp() >= deadline)
			return false;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 100, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* The lease is busy: say who holds it.  Needs a transaction with SPI. */
pg_noreturn static void lease_report_busy(int32 target_id);

static void
lease_report_busy(int32 target_id)
{
	char	   *holder_text = lease_holder_text(target_id);

	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("the target of this route is leased by another dpwin invocation"),
			 errdetail("The lease (advisory lock %d, %d) is held by %s.",
					   DPWIN_LOCK_CLASS, target_id, holder_text),
			 errhint("Wait for it to finish, or set dpwin.lease_timeout to wait for the lease.")));
}

/*
 * Bump the epoch and record the holder, in the current transaction (SPI
 * connected).  The row lock this takes waits for every fenced write that
 * has checked the old epoch (FOR SHARE) to commit.
 */
static int64
lease_bump_epoch(int32 target_id, const pg_uuid_t *holder)
{
	Oid			types[3] = {INT4OID, INT4OID, UUIDOID};
	Datum		args[3];
	char		nulls[3] = {' ', ' ', ' '};

	args[0] = Int32GetDatum(target_id);
	args[1] = Int32GetDatum(MyProcPid);
	if (holder)
		args[2] = UUIDPGetDatum(holder);
	else
	{
		args[2] = (Datum) 0;
		nulls[2] = 'n';
	}
	if (dpwin_catalog_exec("UPDATE dpwin.lease SET epoch = epoch + 1,"
						   " holder_pid = $2, holder_invocation = $3,"
						   " acquired_at = clock_timestamp()"
						   " WHERE target_id = $1 RETURNING epoch",
						   3, types, args, nulls, false) != 1)
		elog(ERROR, "dpwin.lease row %d is missing", target_id);
	return DatumGetInt64(dpwin_catalog_not_null(Anum_lease_epoch, "lease"));
}

int64
dpwin_lease_acquire(int32 target_id, const pg_uuid_t *holder)
{
	int64		epoch;

	if (!lease_lock_wait(target_id))
	{
		StartTransactionCommand();
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		lease_report_busy(target_id);
	}

	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	epoch = lease_bump_epoch(target_id, holder);
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
	if (!lease_held(target_id))
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

/* Is the lock held by this process? */
static bool
lease_held(int32 target_id)
{
	LOCKTAG		tag;

	lease_locktag(&tag, target_id);
	return dpwin_lock_held_by_me(&tag, ExclusiveLock);
}

void
dpwin_lease_check_epoch(int32 target_id, int64 epoch)
{
	Oid			types[1] = {INT4OID};
	Datum		args[1] = {Int32GetDatum(target_id)};
	int64		current;

	if (dpwin_catalog_exec("SELECT epoch FROM dpwin.lease WHERE target_id = $1 FOR SHARE",
						   1, types, args, NULL, false) != 1)
		elog(ERROR, "dpwin.lease row %d is missing", target_id);
	current = DatumGetInt64(dpwin_catalog_not_null(Anum_lease_epoch, "lease"));
	if (current != epoch)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("lease epoch %lld of target %d is stale: this runner was fenced",
						(long long) epoch, target_id),
				 errdetail("The target's current epoch is %lld: another runner took the lease.",
						   (long long) current)));
}
