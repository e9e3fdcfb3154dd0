/*-------------------------------------------------------------------------
 *
 * progress.c
 *	  Progress of running invocations in shared memory.
 *
 *	  The coordinator claims a slot when extraction starts; its workers add
 *	  rows, bytes and finished chunks with atomics, so the hot path takes no
 *	  lock.  A slot is freed by the coordinator, or by its exit callback if
 *	  it dies, so that a crashed invocation never leaves a stale row.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "progress.h"

typedef struct DpwinProgressShared
{
	LWLock	   *lock;
	int			nslots;
	DpwinProgressSlot slots[FLEXIBLE_ARRAY_MEMBER];
} DpwinProgressShared;

static DpwinProgressShared *progress = NULL;

/* The number of slots: dpwin.max_invocations (dpwin.c), at server start. */
static int	max_invocations = 16;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Slot owned by this process, released on exit. */
static int	my_slot = -1;

static Size
progress_shmem_size(void)
{
	return add_size(offsetof(DpwinProgressShared, slots),
					mul_size(sizeof(DpwinProgressSlot), max_invocations));
}

static void
progress_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(progress_shmem_size());
	RequestNamedLWLockTranche("dpwin", 1);
}

static void
progress_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	progress = ShmemInitStruct("dpwin progress", progress_shmem_size(),
							   &found);
	if (!found)
	{
		progress->lock = &(GetNamedLWLockTranche("dpwin"))->lock;
		progress->nslots = max_invocations;
		for (int i = 0; i < progress->nslots; i++)
		{
			DpwinProgressSlot *s = &progress->slots[i];

			memset(s, 0, sizeof(*s));
			pg_atomic_init_u32(&s->chunks_done, 0);
			pg_atomic_init_u64(&s->rows, 0);
			pg_atomic_init_u64(&s->bytes, 0);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

void
dpwin_progress_init(int nslots)
{
	max_invocations = nslots;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = progress_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = progress_shmem_startup;
}

static void
progress_on_exit(int code, Datum arg)
{
	if (my_slot >= 0)
		dpwin_progress_release(my_slot);
}

int
dpwin_progress_claim(const pg_uuid_t *invocation_id, int32 route_id,
					 int chunks_total)
{
	static bool exit_callback_registered = false;
	int			slot = -1;

	Assert(progress != NULL);
	LWLockAcquire(progress->lock, LW_EXCLUSIVE);
	for (int i = 0; i < progress->nslots; i++)
	{
		if (!progress->slots[i].in_use)
		{
			DpwinProgressSlot *s = &progress->slots[i];

			s->in_use = true;
			s->invocation_id = *invocation_id;
			s->route_id = route_id;
			s->coordinator_pid = MyProcPid;
			strlcpy(s->phase, "starting", sizeof(s->phase));
			s->chunks_total = chunks_total;
			pg_atomic_write_u32(&s->chunks_done, 0);
			pg_atomic_write_u64(&s->rows, 0);
			pg_atomic_write_u64(&s->bytes, 0);
			s->started_at = GetCurrentTimestamp();
			slot = i;
			break;
		}
	}
	LWLockRelease(progress->lock);

	if (slot < 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many dpwin invocations are running"),
				 errdetail("All %d progress slots are in use.", progress->nslots),
				 errhint("Raise dpwin.max_invocations (requires a restart).")));

	my_slot = slot;
	if (!exit_callback_registered)
	{
		before_shmem_exit(progress_on_exit, (Datum) 0);
		exit_callback_registered = true;
	}
	return slot;
}

void
dpwin_progress_release(int slot)
{
	if (progress == NULL || slot < 0 || slot >= progress->nslots)
		return;
	LWLockAcquire(progress->lock, LW_EXCLUSIVE);
	progress->slots[slot].in_use = false;
	LWLockRelease(progress->lock);
	if (slot == my_slot)
		my_slot = -1;
}

void
dpwin_progress_phase(int slot, const char *phase)
{
	if (progress == NULL || slot < 0 || slot >= progress->nslots)
		return;
	LWLockAcquire(progress->lock, LW_EXCLUSIVE);
	strlcpy(progress->slots[slot].phase, phase, NAMEDATALEN);
	LWLockRelease(progress->lock);
}

void
dpwin_progress_add(int slot, uint32 chunks, uint64 rows, uint64 bytes)
{
	DpwinProgressSlot *s;

	if (progress == NULL || slot < 0 || slot >= progress->nslots)
		return;
	s = &progress->slots[slot];
	if (chunks)
		pg_atomic_fetch_add_u32(&s->chunks_done, chunks);
	if (rows)
		pg_atomic_fetch_add_u64(&s->rows, rows);
	if (bytes)
		pg_atomic_fetch_add_u64(&s->bytes, bytes);
}

PG_FUNCTION_INFO_V1(dpwin_progress);

/*
 * dpwin.progress(): one row per running invocation.
 */
Datum
dpwin_progress(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (progress == NULL)
		PG_RETURN_VOID();

	LWLockAcquire(progress->lock, LW_SHARED);
	for (int i = 0; i < progress->nslots; i++)
	{
		DpwinProgressSlot *s = &progress->slots[i];
		Datum		values[9];
		bool		nulls[9] = {0};
		pg_uuid_t  *id;

		if (!s->in_use)
			continue;
		id = palloc(sizeof(pg_uuid_t));
		*id = s->invocation_id;
		values[0] = UUIDPGetDatum(id);
		values[1] = Int32GetDatum(s->route_id);
		values[2] = Int32GetDatum(s->coordinator_pid);
		values[3] = CStringGetTextDatum(s->phase);
		values[4] = Int32GetDatum(s->chunks_total);
		values[5] = Int32GetDatum((int32) pg_atomic_read_u32(&s->chunks_done));
		values[6] = Int64GetDatum((int64) pg_atomic_read_u64(&s->rows));
		values[7] = Int64GetDatum((int64) pg_atomic_read_u64(&s->bytes));
		values[8] = TimestampTzGetDatum(s->started_at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(progress->lock);
	PG_RETURN_VOID();
}
