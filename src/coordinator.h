/*-------------------------------------------------------------------------
 *
 * coordinator.h
 *	  The refresh state machine and its steps (docs/design.md, "The state
 *	  machine").  Private to the coordinator's files: coordinator.c (the
 *	  machine, the composition root), stage.c (admission and extraction),
 *	  publish.c (the generation and its publication) and finish.c
 *	  (evidence, route state, the result).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_COORDINATOR_H
#define DPWIN_COORDINATOR_H

#include "lib/stringinfo.h"

#include "call.h"
#include "chclient.h"
#include "digest.h"
#include "extract.h"
#include "generation.h"
#include "registry.h"
#include "route.h"
#include "target.h"

/* Everything the coordinator knows about one invocation. */
typedef struct Coordinator
{
	DpwinCallShared *call;
	MemoryContext cxt;			/* lives as long as the process */
	pg_uuid_t	id;
	bool		recovering;		/* entered at a journaled state */

	DpwinRoute *route;
	DpwinServerConf *conf;
	ChClient   *client;
	DpwinTargetInfo *target;	/* what admission learned */
	char	   *schema_fingerprint; /* journaled by admission, if any */
	int32		target_id;
	int64		epoch;
	bool		lease_held;
	DpwinState	state;			/* as last journaled by us */
	bool		registered;		/* the invocation row exists */
	bool		not_published;	/* the exchange is known not to have run */

	TimestampTz interval_end;
	TimestampTz lo;
	TimestampTz hi;
	List	   *chunks;			/* DpwinChunkBounds */
	DpwinDigestKey key;
	int			progress_slot;

	/* extraction */
	DpwinChunkSlot *slots;		/* the chunks' receipts */
	int			nchunks;
	char	   *snapshot_name;

	/* generation and publication */
	char	   *generation;
	char	   *backup;
	DpwinGeneration *gen;		/* how it was built (generation.c) */
	DpwinDigest source_digest;	/* every chunk */
	DpwinDigest staged_digest;	/* the chunks staged (not skipped) */
	int			skipped_chunks;
	int64		source_rows;
	int64		staged_rows;
	int64		kept_rows;
	int64		final_rows;
	int64		encoded_bytes;

	/* phase timings, in seconds; < 0 when unavailable */
	double		extract_seconds;
	double		build_seconds;
	double		verify_seconds;
	double		publish_seconds;
} Coordinator;

/* coordinator.c */
extern void coordinator_load(Coordinator *c, int32 route_id);
extern void coordinator_plan_window(Coordinator *c);
extern void coordinator_transition(Coordinator *c, DpwinState to,
								   const char *message, const char *sqlstate);
extern void coordinator_drop_own_tables(Coordinator *c);
pg_noreturn extern void coordinator_expire_snapshot(Coordinator *c);
extern double coordinator_seconds_since(TimestampTz start);
extern void coordinator_json_text(StringInfo buf, const char *key,
								  const char *value, bool comma);

/* stage.c: the steps of planned, extracting and staged */
extern DpwinTargetInfo *coordinator_admit_target(Coordinator *c);
extern DpwinState step_admit(Coordinator *c);
extern DpwinState step_extract(Coordinator *c);
extern DpwinState step_check_receipts(Coordinator *c);
extern void coordinator_extract_chunks(Coordinator *c, DpwinExtractMode mode,
									   void (*overlap) (Coordinator *c));
extern void coordinator_tally_receipts(Coordinator *c);
extern char *coordinator_plan_json(Coordinator *c);

/* publish.c: the steps of verified and publishing (or unknown) */
extern List *coordinator_window_ranges(Coordinator *c);
extern List *coordinator_staged_ranges(Coordinator *c);
extern void coordinator_check_skipped_rows(Coordinator *c);
extern void coordinator_prepare_generation(Coordinator *c, List *ranges);
extern DpwinState step_build(Coordinator *c);
extern DpwinState step_publish(Coordinator *c);
extern void coordinator_record_outcome(Coordinator *c, DpwinOutcome outcome);

/* verify.c: dpwin.verify(), outside the state machine */
extern void coordinator_verify(Coordinator *c);

/* finish.c: the steps of published and evidenced, and the caller's result */
extern DpwinState step_evidence(Coordinator *c);
extern DpwinState step_advance(Coordinator *c);
extern void coordinator_fill_result(Coordinator *c);

#endif							/* DPWIN_COORDINATOR_H */
