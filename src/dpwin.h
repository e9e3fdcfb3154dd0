/*-------------------------------------------------------------------------
 *
 * dpwin.h
 *	  Definitions shared by every part of dpwin, owned by dpwin.c: the
 *	  GUCs, the advisory-lock key space, a few limits and general helpers.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_H
#define DPWIN_H

#include "postgres.h"

#include "utils/uuid.h"

#include "pg_compat.h"

#define DPWIN_VERSION_STR "0.2.0"

extern void _PG_init(void);

/*
 * dpwin's advisory locks use the two-int form, with this fixed class id as
 * the first key ("DPWI" read as a big-endian int4) and a dpwin-owned id as
 * the second, so they can never collide with hashtext()-based locks that
 * other software takes with the one-bigint form.
 */
#define DPWIN_LOCK_CLASS		((int32) 0x44505749)

/* Limits that the SQL layer and the C layer must agree on. */
#define DPWIN_MAX_PARALLELISM	64
#define DPWIN_MAX_RETRIES		2	/* a chunk gets 1 + 2 attempts */

/* GUCs (dpwin.c) */
extern int	dpwin_max_workers;
extern int	dpwin_lease_timeout_ms;
extern int	dpwin_retry_backoff_ms;
extern int	dpwin_max_invocations;	/* sizes progress.c's slots */

/* General helpers (dpwin.c) */
extern char *dpwin_uuid_text(const pg_uuid_t *id);
extern pg_uuid_t *dpwin_uuid_copy(const pg_uuid_t *id);

#endif							/* DPWIN_H */
