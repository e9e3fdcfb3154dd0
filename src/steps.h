/*-------------------------------------------------------------------------
 *
 * steps.h
 *	  The steps of the refresh state machine (docs/design.md, "The state
 *	  machine"), one per state that is not final, which stage.c, publish.c and
 *	  finish.c own.  Only coordinator.c, which holds the step table, calls
 *	  them.
 *
 *	  Each step is named after the state it runs in.  Its phase, as
 *	  dpwin.progress shows it, is in coordinator.c's step table.
 *
 *	  A step does its state's work and returns the next state with what
 *	  must commit with it; it never journals or assigns a state itself
 *	  (dpwin_invocation_transition() does).  A step that cannot go on
 *	  ereports, leaving in c->build.outcome what it learned of the exchange.
 *
 *	  stage.c    planned     admit the target               -> extracting
 *	             extracting  one snapshot, the chunk workers -> staged
 *	             staged      every receipt verified          -> verified
 *	  publish.c  verified    build and check the generation,
 *	                         the intent                      -> publishing
 *	             publishing  EXCHANGE, judged by the UUIDs   -> published
 *	             (unknown)
 *	  finish.c   published   durable evidence                -> evidenced
 *	             evidenced   the route's state, the result   -> completed
 *
 *	  A rollback (docs/design.md, "Rolling back a generation") is
 *	  registered in verified and has its own step there:
 *
 *	  rollback.c verified    check the kept backup against
 *	                         the target, the intent          -> publishing
 *
 *	  and takes the refresh's steps from publishing on.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_STEPS_H
#define DPWIN_STEPS_H

#include "invocation.h"

typedef struct DpwinStepResult
{
	DpwinState	next;
	DpwinCommitWith with;		/* commits with the change; NULL: nothing */
} DpwinStepResult;

/* A step's result (a function: pg_bsd_indent mangles compound literals). */
static inline DpwinStepResult
dpwin_step_result(DpwinState next, DpwinCommitWith with)
{
	DpwinStepResult result;

	result.next = next;
	result.with = with;
	return result;
}

/* stage.c */
extern DpwinStepResult dpwin_step_planned(Coordinator *c);
extern DpwinStepResult dpwin_step_extracting(Coordinator *c);
extern DpwinStepResult dpwin_step_staged(Coordinator *c);

/* publish.c */
extern DpwinStepResult dpwin_step_verified(Coordinator *c);
extern DpwinStepResult dpwin_step_publishing(Coordinator *c);

/* The intent that ends the verified step, a refresh's or a rollback's. */
extern DpwinStepResult dpwin_step_intent(Coordinator *c, DpwinPublication *pub);

/* rollback.c */
extern DpwinStepResult dpwin_step_rollback(Coordinator *c);

/* finish.c */
extern DpwinStepResult dpwin_step_published(Coordinator *c);
extern DpwinStepResult dpwin_step_evidenced(Coordinator *c);

#endif							/* DPWIN_STEPS_H */
