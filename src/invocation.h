/*-------------------------------------------------------------------------
 *
 * invocation.h
 *	  One invocation as its coordinator knows it (docs/design.md, "The
 *	  state machine"): who it is, what it extracted, what it built, how
 *	  long each phase took, and its state.  The state is assigned in one
 *	  place, dpwin_invocation_transition(), which journals the change with
 *	  whatever must commit with it.
 *
 *	  Each field of Coordinator has one writing file, named at the field
 *	  or its group below; other files read it, or call that file's
 *	  functions to change it.  dpwin_invocation_init() gives every field
 *	  its initial value first.
 *
 *	  Below the steps (steps.h) and the machine (coordinator.c); calls no
 *	  step.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_INVOCATION_H
#define DPWIN_INVOCATION_H

#include "lib/stringinfo.h"

#include "call.h"
#include "chclient.h"
#include "extraction.h"
#include "fdw.h"
#include "generation.h"
#include "publication.h"
#include "registry.h"
#include "route.h"
#include "target.h"

/*
 * What was built and published.  build.c writes the generation and the
 * counts (dpwin_build_*()), publish.c the intent and the exchange's
 * outcome, finish.c the backup and the evidence.
 */
typedef struct DpwinBuild
{
	char	   *generation;		/* build.c */
	char	   *backup;			/* finish.c */
	DpwinGeneration *gen;		/* build.c; how it was built (generation.c) */
	DpwinPublication *pub;		/* publish.c; the intent, once known */
	char	   *exchange_query_id;	/* publish.c; the intent's EXCHANGE */
	char	   *replaced_uuid;	/* publish.c; the table under the
								 * generation's name, as the exchange's
								 * reconciliation read it */
	char	   *metrics;		/* finish.c; the evidence, as jsonb text */

	/*
	 * The window's facts for the evidence, read from the generation while
	 * its rows were counted; NULL when not read (a recovery reads them from
	 * the published target).  publish.c writes the facts, build.c the
	 * counts.
	 */
	char	   *window_days;
	char	   *window_bounds;
	int64		kept_rows;
	int64		final_rows;

	/*
	 * What the exchange is known to have done: NONE before any, or while
	 * nothing is known; NOT_PUBLISHED when the target is untouched; UNKNOWN
	 * or PENDING when it cannot be told now.  publish.c writes it.
	 */
	DpwinOutcome outcome;
} DpwinBuild;

/* Phase timings, in seconds; < 0 when unavailable. */
typedef struct DpwinTimings
{
	double		extract;		/* stage.c */
	double		build;			/* build.c */
	double		verify;			/* publish.c */
	double		publish;		/* publish.c */
} DpwinTimings;

/*
 * The clean-up's statements on the second connection, still to be waited
 * for (dpwin_invocation_list_own_tables_start()).
 */
typedef enum DpwinSecondPending
{
	DPWIN_SECOND_NONE,
	DPWIN_SECOND_LISTING,		/* the invocation's tables are listed */
	DPWIN_SECOND_DROPPING		/* the listed tables are dropped */
} DpwinSecondPending;

/* Everything the coordinator knows about one invocation. */
typedef struct Coordinator
{
	/*
	 * invocation.c writes every field that names no other file here: the
	 * identity, the route, the connections and their clean-up, the
	 * registration, the window and the admitted target
	 * (dpwin_invocation_set_target()).
	 */
	DpwinCallShared *call;
	MemoryContext cxt;			/* lives as long as the process */
	pg_uuid_t	id;
	DpwinKind	kind;			/* refresh or rollback */
	char	   *rollback_backup;	/* a rollback's backup: the generation it
									 * puts back */
	bool		recovering;		/* coordinator.c; entered at a journaled
								 * state */
	DpwinRoute *route;
	DpwinServerConf *conf;
	ChClient   *client;
	ChClient   *second_client;	/* dpwin_invocation_second_client() */
	DpwinSecondPending second_pending;	/* what it runs for the clean-up */
	bool		own_tables_listed;	/* ... and all but the generation were
									 * listed for that DROP */
	DpwinTargetInfo *target;	/* what admission learned */
	char	   *schema_fingerprint; /* journaled by admission, if any */
	char	   *published_generation;	/* the UUID that the route's last
										 * publication put in place, if any */
	int32		target_id;
	int64		epoch;			/* coordinator.c, with the lease */
	bool		lease_held;		/* coordinator.c */
	bool		registered;		/* the invocation row exists */
	int			progress_slot;	/* coordinator.c */
	TimestampTz interval_end;
	TimestampTz lo;
	TimestampTz hi;

	/* skip_unchanged: what the last publication knew, if it can be used */
	DpwinDigestCache *digest_cache; /* invocation.c */
	int			cached_digests; /* stage.c; chunks compared with it, not
								 * digested */

	/* as last journaled by us: dpwin_invocation_transition() only */
	DpwinState	state;

	/*
	 * invocation.c plans, recalls and extracts (dpwin_invocation_extract(),
	 * through extraction.c, which fills the receipts); stage.c writes only
	 * what its skipping reads of the target: kept_facts, kept_null_rows and
	 * the slots' target_digest.
	 */
	DpwinExtraction ext;
	DpwinBuild	build;			/* see DpwinBuild */
	DpwinTimings times;			/* see DpwinTimings */
} Coordinator;

/* What must commit with a change of state, inside its transaction. */
typedef void (*DpwinCommitWith) (Coordinator *c);

extern void dpwin_invocation_init(Coordinator *c, DpwinCallShared *call);
extern void dpwin_invocation_load(Coordinator *c, int32 route_id);
extern void dpwin_invocation_plan_window(Coordinator *c);
extern void dpwin_invocation_plan_rollback(Coordinator *c, const char *backup,
										   TimestampTz interval_end);
extern void dpwin_invocation_adopt_digest_cache(Coordinator *c);
extern List *dpwin_invocation_register(Coordinator *c);
extern DpwinInvocation *dpwin_invocation_recall(Coordinator *c);

/*
 * The one writer of c->state: asserts that `to` may follow the current
 * state, then journals it in a transaction of its own together with
 * `with` (if any) and the error of a failure state (sqlerrcode 0: none).
 */
extern void dpwin_invocation_transition(Coordinator *c, DpwinState to,
										DpwinCommitWith with,
										const char *message, int sqlerrcode);

extern void dpwin_invocation_set_target(Coordinator *c, DpwinTargetInfo *target);
extern void dpwin_invocation_open_slots(Coordinator *c);
extern double dpwin_invocation_extract(Coordinator *c, DpwinExtractMode mode,
									   void (*overlap) (void *arg), void *arg);
extern void dpwin_invocation_record_outcome(Coordinator *c);
extern ChClient *dpwin_invocation_second_client(Coordinator *c);
extern void dpwin_invocation_list_own_tables_start(Coordinator *c);
extern void dpwin_invocation_drop_listed_start(Coordinator *c,
											   const char *generation);
extern void dpwin_invocation_drop_own_tables(Coordinator *c);
extern void dpwin_invocation_fill_result(Coordinator *c);

/* Append `"key": "value"` (or null) to a JSON object under construction. */
extern void dpwin_json_text(StringInfo buf, const char *key, const char *value,
							bool comma);

#endif							/* DPWIN_INVOCATION_H */
