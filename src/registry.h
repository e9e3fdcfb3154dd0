/*-------------------------------------------------------------------------
 *
 * registry.h
 *	  The invocation registry (dpwin.invocation), which registry.c owns:
 *	  the states of the refresh state machine and each invocation's
 *	  record.  The chunk journal, publications, evidence, route state and
 *	  verifications have headers of their own (chunk.h, publication.h,
 *	  evidence.h, route_state.h, verification.h).
 *
 *	  Every mutation is a compare-and-swap on the target's fencing epoch
 *	  (lease.h), so a runner that lost its lease cannot write, however late
 *	  it wakes up.  Every change of an invocation's state goes through
 *	  dpwin_registry_transition(), which asserts the legal predecessor.
 *
 *	  Callers must be inside a transaction with SPI connected.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_REGISTRY_H
#define DPWIN_REGISTRY_H

#include "access/tupdesc.h"
#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "utils/uuid.h"

#include "digest.h"

typedef enum DpwinState
{
	DPWIN_STATE_PLANNED,
	DPWIN_STATE_EXTRACTING,
	DPWIN_STATE_STAGED,
	DPWIN_STATE_VERIFIED,
	DPWIN_STATE_PUBLISHING,
	DPWIN_STATE_PUBLISHED,
	DPWIN_STATE_EVIDENCED,
	DPWIN_STATE_COMPLETED,
	DPWIN_STATE_FAILED,
	DPWIN_STATE_ABANDONED,
	DPWIN_STATE_SNAPSHOT_EXPIRED,
	DPWIN_STATE_UNKNOWN
} DpwinState;

#define DPWIN_NSTATES (DPWIN_STATE_UNKNOWN + 1)

/*
 * What an invocation does (dpwin.invocation.kind): a refresh publishes a
 * window of its source; a rollback puts a kept backup back in the target's
 * place (docs/design.md, "Rolling back a generation").
 */
typedef enum DpwinKind
{
	DPWIN_KIND_REFRESH,
	DPWIN_KIND_ROLLBACK
} DpwinKind;

typedef struct DpwinInvocation
{
	pg_uuid_t	id;
	int32		route_id;
	int32		target_id;
	TimestampTz interval_end;
	TimestampTz window_lo;
	TimestampTz window_hi;
	char	   *plan;			/* jsonb text */
	char	   *plan_fingerprint;
	char	   *config_fingerprint;
	char	   *schema_fingerprint;
	char	   *snapshot_id;
	int64		lease_epoch;
	DpwinState	state;
	char	   *error;
	char	   *error_sqlstate;
	Oid			caller_role;
	int64		backfill_id;	/* the backfill it publishes a window of; 0: none */
	DpwinKind	kind;
	char	   *rollback_backup;	/* a rollback's backup, from its plan */
} DpwinInvocation;

extern const char *dpwin_registry_state_name(DpwinState state);
extern DpwinState dpwin_registry_state_from_name(const char *name);
extern bool dpwin_registry_state_is_final(DpwinState state);
extern const char *dpwin_registry_kind_name(DpwinKind kind);
extern DpwinKind dpwin_registry_kind_from_name(const char *name);

/* May an invocation go from `from` to `to`? (docs/design.md) */
extern bool dpwin_registry_state_may_follow(DpwinState from, DpwinState to);

/*
 * Why an invocation left planned or extracting by a coordinator that is
 * gone can never go on, as journaled and reported.
 */
#define DPWIN_SNAPSHOT_GONE \
	"the coordinator ended before extraction finished; its snapshot is gone"
#define DPWIN_SNAPSHOT_GONE_ERRCODE ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE

/* An invocation left before publication by a coordinator that is gone. */
typedef struct DpwinOrphan
{
	int32		route_id;
	pg_uuid_t	id;
} DpwinOrphan;

/* Load an invocation; NULL when missing and missing_ok. */
extern DpwinInvocation *dpwin_registry_load(const pg_uuid_t *id, bool missing_ok);

/*
 * Record a new invocation in inv->state (planned; a rollback verified),
 * with its kind, its immutable plan and one pending journal row per chunk
 * (a List of DpwinChunkBounds; a rollback has none).
 */
extern void dpwin_registry_create(const DpwinInvocation *inv, List *chunks);

/*
 * The one function that changes an invocation's state.  Checks that the
 * current state is a legal predecessor of `to` and that `epoch` is still
 * the target's epoch; ereports otherwise.  errmsg/sqlstate are recorded
 * with failure states.
 */
extern void dpwin_registry_transition(const pg_uuid_t *id, DpwinState to,
									  int64 epoch, const char *errmsg,
									  const char *sqlstate);

/* Store what admission learned (schema fingerprint) — fenced. */
extern void dpwin_registry_set_schema(const pg_uuid_t *id, int64 epoch,
									  const char *schema_fingerprint);
extern void dpwin_registry_set_snapshot(const pg_uuid_t *id, int64 epoch,
										const char *snapshot_id);
extern void dpwin_registry_set_result(const pg_uuid_t *id, const char *result_json);

/* The result journaled with the completion (jsonb text); NULL when none. */
extern char *dpwin_registry_result(const pg_uuid_t *id);

/*
 * An older invocation of the target whose publication is not settled
 * (intent without outcome, or outcome unknown); NULL when none.
 */
extern char *dpwin_registry_unsettled_publication(int32 target_id,
												  const pg_uuid_t *except);

/*
 * The UUID of the generation that the route's newest publication into
 * target_id (server, database and table) put in its place; NULL when it
 * never published there.
 */
extern char *dpwin_registry_published_generation(int32 route_id,
												 int32 target_id);

/*
 * Invocations of the target left before publication by a coordinator that
 * no longer runs (the caller holds the target's lease, so none can be
 * running): their snapshot is gone.  Marks them snapshot_expired and
 * returns how many.
 */
extern List *dpwin_registry_orphans(int32 target_id, const pg_uuid_t *except);
extern int	dpwin_registry_expire_orphans(int32 target_id, int64 epoch,
										  const pg_uuid_t *except);

/* The digest keys of an invocation's plan, as text; NULL when none. */
extern char *dpwin_registry_digest_key(const pg_uuid_t *id);

/*
 * What the last evidenced publication of a route knows of its target's
 * rows: the digest of each chunk it published or kept (under its digest
 * key), the target's schema fingerprint, and the fingerprint of the
 * generation's layout as it published it (docs/design.md, "Skipping
 * unchanged chunks").
 */
typedef struct DpwinDigestCache
{
	DpwinDigestKey key;
	char	   *schema_fingerprint;
	char	   *layout;
	char	   *target_uuid;	/* the generation it published */
	int			nchunks;
	TimestampTz *lo;
	TimestampTz *hi;
	DpwinDigest *digest;
} DpwinDigestCache;

/*
 * The cache of the route's newest evidence whose invocation ran under
 * config_fingerprint and recorded its parts; NULL when there is none.
 * Allocated in the caller's memory context.
 */
extern DpwinDigestCache *dpwin_registry_digest_cache(int32 route_id,
													 const char *config_fingerprint);

/*
 * An invocation of the target other than `except` that published and has
 * not finished (published, evidenced); NULL when none.
 */
extern char *dpwin_registry_unfinished_publication(int32 target_id,
												   const pg_uuid_t *except);

#endif							/* DPWIN_REGISTRY_H */
