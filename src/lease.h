/*-------------------------------------------------------------------------
 *
 * lease.h
 *	  The target lease (lease.c): a session-level advisory lock in dpwin's key space
 *	  (DPWIN_LOCK_CLASS, target_id) held by the process that runs an
 *	  invocation, plus a fencing epoch in dpwin.lease bumped at every
 *	  acquisition.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_LEASE_H
#define DPWIN_LEASE_H

#include "utils/uuid.h"

/*
 * The target's id in dpwin.lease, creating the row on first use.  Runs in
 * the caller's transaction.
 */
extern int32 dpwin_lease_target_id(const char *server_name,
								   const char *database, const char *table);

/*
 * Take the target's advisory lock (waiting up to dpwin.lease_timeout) and
 * bump its epoch in a transaction of its own; returns the new epoch.
 * Fails with ERRCODE_LOCK_NOT_AVAILABLE naming the holder when the lock is
 * held by another process.  Must be called outside a transaction.
 */
extern int64 dpwin_lease_acquire(int32 target_id, const pg_uuid_t *holder);

/* Release the advisory lock and clear the holder columns (best effort). */
extern void dpwin_lease_release(int32 target_id);

/*
 * Lock the lease row FOR SHARE and check that epoch is current: the
 * compare half of every fenced write.  ereports when fenced.
 */
extern PGDLLEXPORT void dpwin_lease_check_epoch(int32 target_id, int64 epoch);

#endif							/* DPWIN_LEASE_H */
