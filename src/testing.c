/*-------------------------------------------------------------------------
 *
 * testing.c
 *	  Test-only SQL access to the target lease and its fencing epoch.
 *
 *	  A refresh takes its lease inside a coordinator background worker, so
 *	  from SQL alone a test cannot play a runner that held a lease, lost it
 *	  and wakes up to write with its old epoch.  These functions let an
 *	  isolation spec do exactly that in an ordinary session: take the lease
 *	  and bump the epoch (as a coordinator does), release it, and attempt a
 *	  fenced write with any epoch.  Superusers only: bumping an epoch fences
 *	  whatever runner holds the target.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"

#include "catalog.h"
#include "lease.h"

PG_FUNCTION_INFO_V1(dpwin__lease_acquire);
PG_FUNCTION_INFO_V1(dpwin__lease_release);
PG_FUNCTION_INFO_V1(dpwin__fenced_write);

/* Refuse non-superusers, and targets without a dpwin.lease row. */
static int32
testing_target_arg(FunctionCallInfo fcinfo, const char *fn)
{
	int32		target_id;
	Oid			types[1] = {INT4OID};
	Datum		args[1];

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may call %s", fn),
				 errdetail("It is a test function: it takes or fences a target's lease.")));
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("target_id must not be NULL")));
	target_id = PG_GETARG_INT32(0);
	args[0] = Int32GetDatum(target_id);
	if (dpwin_catalog_exec("SELECT 1 FROM dpwin.lease WHERE target_id = $1",
						   1, types, args, NULL, true) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("dpwin target %d does not exist", target_id),
				 errhint("Targets are the rows of dpwin.lease.")));
	return target_id;
}

/*
 * dpwin._lease_acquire(target_id) -> the new epoch.  Takes the target's
 * lease for this session (waiting up to dpwin.lease_timeout, failing with
 * 55P03 naming the holder) and bumps the epoch in the current transaction,
 * as a coordinator does in one of its own.
 */
Datum
dpwin__lease_acquire(PG_FUNCTION_ARGS)
{
	int32		target_id;
	int64		epoch;

	SPI_connect();
	target_id = testing_target_arg(fcinfo, "dpwin._lease_acquire()");
	epoch = dpwin_lease_acquire_in_xact(target_id, NULL);
	SPI_finish();
	PG_RETURN_INT64(epoch);
}

/*
 * dpwin._lease_release(target_id) -> whether this session held it.  The
 * epoch stays: a runner that lost its lease keeps its old epoch, and every
 * write it attempts is compared with the current one.
 */
Datum
dpwin__lease_release(PG_FUNCTION_ARGS)
{
	int32		target_id;
	bool		held;

	SPI_connect();
	target_id = testing_target_arg(fcinfo, "dpwin._lease_release()");
	held = dpwin_lease_release_in_xact(target_id);
	SPI_finish();
	PG_RETURN_BOOL(held);
}

/*
 * dpwin._fenced_write(target_id, epoch): the fence of every journal write
 * (dpwin_chunk_begin, dpwin_registry_transition, ... all start with it),
 * without the write.  Locks the lease row FOR SHARE until the end of the
 * transaction, so a concurrent epoch bump waits for it, and fails with
 * 55P03 "fenced: ..." when epoch is not the current one.
 */
Datum
dpwin__fenced_write(PG_FUNCTION_ARGS)
{
	int32		target_id;

	SPI_connect();
	target_id = testing_target_arg(fcinfo, "dpwin._fenced_write()");
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("epoch must not be NULL")));
	dpwin_lease_check_epoch(target_id, PG_GETARG_INT64(1));
	SPI_finish();
	PG_RETURN_VOID();
}
