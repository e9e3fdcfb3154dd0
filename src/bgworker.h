/*-------------------------------------------------------------------------
 *
 * bgworker.h
 *	  The idioms every dpwin background worker shares, written once in
 *	  bgworker.c: connecting as the caller, launching a dynamic worker, waiting
 *	  for workers, running one unit of work in a transaction of its own, and
 *	  waiting out a retry's backoff.
 *
 *	  The coordinator (coordinator.c) and the chunk workers (worker.c)
 *	  build on it; it calls nothing above it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_BGWORKER_H
#define DPWIN_BGWORKER_H

#include "port/atomics.h"
#include "postmaster/bgworker.h"

/*
 * Connect a dpwin worker to database_id as login_user_id, then take the
 * caller's current role user_id exactly as SET ROLE does.
 */
extern void dpwin_bgworker_connect(Oid database_id, Oid login_user_id,
								   Oid user_id);

/*
 * Register a dynamic background worker running dpwin's function_name with
 * main_arg, notifying this backend, and wait until it has started (or has
 * already stopped).  NULL when no worker slot was free.
 */
extern BackgroundWorkerHandle *dpwin_bgworker_launch(const char *function_name,
													 const char *name,
													 const char *type,
													 Datum main_arg);

/*
 * Wait until every one of the n handles (NULL entries ignored) has
 * stopped, or, when finished is not NULL, until it counts n workers that
 * said they are done (and set the waiter's latch), staying responsive to
 * interrupts.
 */
extern void dpwin_bgworker_wait_all(BackgroundWorkerHandle **handles, int n,
									pg_atomic_uint32 *finished);

/* Terminate the workers and wait until they are gone. */
extern void dpwin_bgworker_stop_all(BackgroundWorkerHandle **handles, int n);

/*
 * A transaction of a worker's own, with a snapshot and SPI connected,
 * shown in pg_stat_activity as `activity`; dpwin_xact_commit() ends it and
 * returns to `cxt`, the caller's long-lived memory context.
 */
extern void dpwin_xact_begin(const char *activity);
extern void dpwin_xact_commit(MemoryContext cxt);

/*
 * Wait ms milliseconds on the process latch (a retry's backoff), handling
 * interrupts as they come and exiting if the postmaster dies.
 */
extern void dpwin_sleep_ms(long ms);

#endif							/* DPWIN_BGWORKER_H */
