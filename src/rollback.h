/*-------------------------------------------------------------------------
 *
 * rollback.h
 *	  dpwin.rollback(): a kept backup put back as a route's target, through
 *	  the one state machine (docs/design.md, "Rolling back a generation").
 *	  The SQL entry point admits the call before any I/O; the coordinator
 *	  chooses the backup under the target's lease, and the rollback's step
 *	  (steps.h) checks it against the target.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_ROLLBACK_H
#define DPWIN_ROLLBACK_H

#include "invocation.h"

/*
 * Under the target's lease, before the invocation is journaled: the backup
 * the rollback puts back (the call's, which must exist in ClickHouse, or
 * the route's newest that still does), and in *interval_end the route's
 * last published interval_end, which the rollback leaves as it is.
 * Refuses while an invocation of the target has not finished its
 * publication.
 */
extern char *dpwin_rollback_choose(Coordinator *c, TimestampTz *interval_end);

#endif							/* DPWIN_ROLLBACK_H */
