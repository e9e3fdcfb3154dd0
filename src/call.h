/*-------------------------------------------------------------------------
 *
 * call.h
 *	  The caller's side of a coordinator: one coordinator background worker
 *	  per refresh, rollback, recovery, abandonment or verification,
 *	  launched by the calling backend, which waits for it and reads its
 *	  outcome from a small dynamic shared memory segment (call.c).
 *
 *	  Running the work in a background worker gives it transactions of its
 *	  own: journal writes commit independently of the caller's transaction
 *	  and survive the caller's cancellation, and the exported snapshot's
 *	  transaction is not the caller's.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_CALL_H
#define DPWIN_CALL_H

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "utils/uuid.h"

#define DPWIN_CALL_MAGIC	0x44505743

typedef enum DpwinCallMode
{
	DPWIN_CALL_REFRESH,
	DPWIN_CALL_RECOVER,
	DPWIN_CALL_ABANDON,
	DPWIN_CALL_VERIFY,			/* invocation_id is the verification's id */
	DPWIN_CALL_ROLLBACK			/* to_backup names the backup, or is empty */
} DpwinCallMode;

typedef struct DpwinCallShared
{
	uint32		magic;
	DpwinCallMode mode;
	Oid			database_id;
	Oid			user_id;		/* the caller's current role: runs as it */
	Oid			login_user_id;	/* the caller's login role: connects as it */
	int32		route_id;
	TimestampTz interval_end;
	pg_uuid_t	invocation_id;
	int			lease_timeout_ms;
	int			max_workers;	/* the caller's dpwin.max_workers */
	int			retry_backoff_ms;	/* the caller's dpwin.retry_backoff */
	int64		backfill_id;	/* a backfill's window (dpwin.backfill); 0: none */
	int			caller_pid;		/* whose latch says the outcome is there */
	char		to_backup[256]; /* a rollback's backup; "": the newest */

	/*
	 * Outcome, written by the coordinator before it sets finished.  With
	 * released also set, the caller returns without waiting for the
	 * coordinator to exit: it has backups to drop (retention), and does not
	 * touch the segment again.
	 */
	bool		finished;
	bool		released;
	int			sqlerrcode;		/* 0: success */
	char		message[2048];
	char		detail[2048];
	char		hint[1024];

	/* Result row of a successful (or settled) call. */
	char		state[NAMEDATALEN];
	TimestampTz window_lo;
	TimestampTz window_hi;
	int			chunks;
	int64		source_rows;
	int64		staged_rows;
	int64		final_rows;
	char		generation_table[256];
	char		backup_table[256];
	char		details[16384]; /* jsonb text */
} DpwinCallShared;

/*
 * Launch a coordinator for `call` and wait for it (caller side).  Cancels
 * the coordinator if the caller is cancelled or terminated while waiting.
 * On return `call` holds the outcome; ereports the coordinator's error.
 */
extern void dpwin_run_coordinator(DpwinCallShared *call);

/* The result row of dpwin_refresh(), dpwin.recover() and dpwin.abandon(). */
extern Datum dpwin_call_result(FunctionCallInfo fcinfo, const DpwinCallShared *call);

/* A call of the given mode by the current user, in the current database. */
extern void dpwin_call_init(DpwinCallShared *call, DpwinCallMode mode);

#endif							/* DPWIN_CALL_H */
