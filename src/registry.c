/*-------------------------------------------------------------------------
 *
 * registry.c
 *	  The invocation registry (dpwin.invocation): the states of the
 *	  refresh state machine, their one writer dpwin_registry_transition()
 *	  with its legal predecessors, and every other record of an invocation
 *	  itself.  The other journals have files of their own: chunk.c,
 *	  publication.c, evidence.c, route_state.c and verification.c.
 *
 *	  All writes run as the catalog owner (catalog.c) and are fenced: each
 *	  one first locks the target's lease row and compares epochs
 *	  (dpwin_lease_check_epoch), in the same transaction as the write, so a
 *	  write by a runner whose lease was taken over fails instead of
 *	  landing.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "lease.h"
#include "registry.h"
#include "window.h"

static const char *const state_names[DPWIN_NSTATES] = {
	[DPWIN_STATE_PLANNED] = "planned",
	[DPWIN_STATE_EXTRACTING] = "extracting",
	[DPWIN_STATE_STAGED] = "staged",
	[DPWIN_STATE_VERIFIED] = "verified",
	[DPWIN_STATE_PUBLISHING] = "publishing",
	[DPWIN_STATE_PUBLISHED] = "published",
	[DPWIN_STATE_EVIDENCED] = "evidenced",
	[DPWIN_STATE_COMPLETED] = "completed",
	[DPWIN_STATE_FAILED] = "failed",
	[DPWIN_STATE_ABANDONED] = "abandoned",
	[DPWIN_STATE_SNAPSHOT_EXPIRED] = "snapshot_expired",
	[DPWIN_STATE_UNKNOWN] = "unknown",
};

#define S(x) (1u << DPWIN_STATE_##x)

/*
 * Legal predecessors of each state (docs/design.md, "The state machine").
 * Failure is legal from any state before publishing; from publishing (or
 * unknown) only once the exchange is known not to have happened.  unknown
 * can be settled into published by recovery once the UUIDs show it.
 */
static const uint32 legal_predecessors[DPWIN_NSTATES] = {
	[DPWIN_STATE_PLANNED] = 0,
	[DPWIN_STATE_EXTRACTING] = S(PLANNED),
	[DPWIN_STATE_STAGED] = S(EXTRACTING),
	[DPWIN_STATE_VERIFIED] = S(STAGED),
	[DPWIN_STATE_PUBLISHING] = S(VERIFIED),
	[DPWIN_STATE_PUBLISHED] = S(PUBLISHING) | S(UNKNOWN),
	[DPWIN_STATE_EVIDENCED] = S(PUBLISHED),
	[DPWIN_STATE_COMPLETED] = S(EVIDENCED),
	[DPWIN_STATE_FAILED] = S(PLANNED) | S(EXTRACTING) | S(STAGED) | S(VERIFIED) | S(PUBLISHING) |
	S(UNKNOWN),
	[DPWIN_STATE_ABANDONED] = S(PLANNED) | S(EXTRACTING) | S(STAGED) | S(VERIFIED) | S(FAILED),
	[DPWIN_STATE_SNAPSHOT_EXPIRED] = S(PLANNED) | S(EXTRACTING),
	[DPWIN_STATE_UNKNOWN] = S(PUBLISHING),
};

/* The states that end an invocation: the one definition, in C and in SQL. */
#define FINAL_STATES (S(COMPLETED) | S(FAILED) | S(ABANDONED) | S(SNAPSHOT_EXPIRED))

const char *
dpwin_registry_state_name(DpwinState state)
{
	Assert(state >= 0 && state < DPWIN_NSTATES);
	return state_names[state];
}

DpwinState
dpwin_registry_state_from_name(const char *name)
{
	for (int i = 0; i < DPWIN_NSTATES; i++)
		if (strcmp(state_names[i], name) == 0)
			return (DpwinState) i;
	elog(ERROR, "unknown dpwin invocation state \"%s\"", name);
	return DPWIN_STATE_FAILED;	/* keep compiler quiet */
}

static const char *const kind_names[] = {
	[DPWIN_KIND_REFRESH] = "refresh",
	[DPWIN_KIND_ROLLBACK] = "rollback",
};

const char *
dpwin_registry_kind_name(DpwinKind kind)
{
	Assert(kind == DPWIN_KIND_REFRESH || kind == DPWIN_KIND_ROLLBACK);
	return kind_names[kind];
}

DpwinKind
dpwin_registry_kind_from_name(const char *name)
{
	if (strcmp(name, kind_names[DPWIN_KIND_ROLLBACK]) == 0)
		return DPWIN_KIND_ROLLBACK;
	if (strcmp(name, kind_names[DPWIN_KIND_REFRESH]) != 0)
		elog(ERROR, "unknown dpwin invocation kind \"%s\"", name);
	return DPWIN_KIND_REFRESH;
}

bool
dpwin_registry_state_is_final(DpwinState state)
{
	return (FINAL_STATES & (1u << state)) != 0;
}

bool
dpwin_registry_state_may_follow(DpwinState from, DpwinState to)
{
	return (legal_predecessors[to] & (1u << from)) != 0;
}

/* Columns of dpwin_registry_load()'s query of dpwin.invocation. */
#define Anum_invocation_route_id			1
#define Anum_invocation_target_id			2
#define Anum_invocation_interval_end		3
#define Anum_invocation_window_lo			4
#define Anum_invocation_window_hi			5
#define Anum_invocation_plan				6
#define Anum_invocation_plan_fingerprint	7
#define Anum_invocation_config_fingerprint	8
#define Anum_invocation_schema_fingerprint	9
#define Anum_invocation_snapshot_id			10
#define Anum_invocation_lease_epoch			11
#define Anum_invocation_state				12
#define Anum_invocation_error				13
#define Anum_invocation_error_sqlstate		14
#define Anum_invocation_caller_role			15
#define Anum_invocation_kind				16
#define Anum_invocation_rollback_backup		17

DpwinInvocation *
dpwin_registry_load(const pg_uuid_t *id, bool missing_ok)
{
	Oid			types[1] = {UUIDOID};
	Datum		args[1] = {UUIDPGetDatum(id)};
	DpwinInvocation *inv;
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext spicxt;

	if (dpwin_catalog_exec("SELECT route_id, target_id, interval_end, window_lo, window_hi,"
						   " plan::text, plan_fingerprint, config_fingerprint,"
						   " schema_fingerprint, snapshot_id, lease_epoch, state,"
						   " error, error_sqlstate, caller_role,"
						   " coalesce(plan->>'kind', 'refresh'), plan->>'backup'"
						   " FROM dpwin.invocation WHERE invocation_id = $1",
						   1, types, args, NULL, false) != 1)
	{
		if (missing_ok)
			return NULL;
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("dpwin invocation %s does not exist", dpwin_uuid_text(id))));
	}

	/*
	 * SPI leaves us in its own procedure context, which SPI_finish frees:
	 * build the result in the caller's context, which outlives it.
	 */
	spicxt = MemoryContextSwitchTo(caller);
	inv = palloc0(sizeof(DpwinInvocation));
	inv->id = *id;
	inv->route_id = dpwin_catalog_int32(0, Anum_invocation_route_id);
	inv->target_id = dpwin_catalog_int32(0, Anum_invocation_target_id);
	inv->interval_end = dpwin_catalog_timestamptz(0, Anum_invocation_interval_end);
	inv->window_lo = dpwin_catalog_timestamptz(0, Anum_invocation_window_lo);
	inv->window_hi = dpwin_catalog_timestamptz(0, Anum_invocation_window_hi);
	inv->plan = dpwin_catalog_text(0, Anum_invocation_plan);
	inv->plan_fingerprint = dpwin_catalog_text(0, Anum_invocation_plan_fingerprint);
	inv->config_fingerprint = dpwin_catalog_text(0, Anum_invocation_config_fingerprint);
	inv->schema_fingerprint = dpwin_catalog_text(0, Anum_invocation_schema_fingerprint);
	inv->snapshot_id = dpwin_catalog_text(0, Anum_invocation_snapshot_id);
	inv->lease_epoch = dpwin_catalog_int64(0, Anum_invocation_lease_epoch);
	inv->state = dpwin_registry_state_from_name(dpwin_catalog_text(0, Anum_invocation_state));
	inv->error = dpwin_catalog_text(0, Anum_invocation_error);
	inv->error_sqlstate = dpwin_catalog_text(0, Anum_invocation_error_sqlstate);
	inv->caller_role = dpwin_catalog_oid(0, Anum_invocation_caller_role);
	inv->kind = dpwin_registry_kind_from_name(dpwin_catalog_text(0, Anum_invocation_kind));
	inv->rollback_backup = dpwin_catalog_text(0, Anum_invocation_rollback_backup);
	MemoryContextSwitchTo(spicxt);
	return inv;
}

void
dpwin_registry_create(const DpwinInvocation *inv, List *chunks)
{
	Oid			types[13] = {
		UUIDOID, INT4OID, INT4OID, TIMESTAMPTZOID,
		TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, TEXTOID, TEXTOID, INT8OID,
		OIDOID, TEXTOID, TEXTOID
	};
	Datum		args[13];
	ListCell   *lc;

	/*
	 * A refresh starts at planned; a rollback, which has no window to read,
	 * at verified (docs/design.md, "Rolling back a generation").
	 */
	Assert(inv->state == (inv->kind == DPWIN_KIND_ROLLBACK ?
						  DPWIN_STATE_VERIFIED : DPWIN_STATE_PLANNED));
	dpwin_lease_check_epoch(inv->target_id, inv->lease_epoch);

	args[0] = UUIDPGetDatum(dpwin_uuid_copy(&inv->id));
	args[1] = Int32GetDatum(inv->route_id);
	args[2] = Int32GetDatum(inv->target_id);
	args[3] = TimestampTzGetDatum(inv->interval_end);
	args[4] = TimestampTzGetDatum(inv->window_lo);
	args[5] = TimestampTzGetDatum(inv->window_hi);
	args[6] = CStringGetTextDatum(inv->plan);
	args[7] = CStringGetTextDatum(inv->plan_fingerprint);
	args[8] = CStringGetTextDatum(inv->config_fingerprint);
	args[9] = Int64GetDatum(inv->lease_epoch);
	args[10] = ObjectIdGetDatum(inv->caller_role);
	args[11] = CStringGetTextDatum(dpwin_registry_state_name(inv->state));
	args[12] = CStringGetTextDatum(dpwin_registry_kind_name(inv->kind));

	/*
	 * A refresh leaves kind to its default, and dpwin reads the kind from
	 * the plan (a rollback's plan names it): a refresh's statements stay
	 * those of 0.1.0, whose catalog has no kind column.
	 */
	dpwin_catalog_exec(inv->kind == DPWIN_KIND_REFRESH ?
					   "INSERT INTO dpwin.invocation (invocation_id, route_id, target_id,"
					   " interval_end, window_lo, window_hi, plan, plan_fingerprint,"
					   " config_fingerprint, lease_epoch, caller_role, state)"
					   " VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10, $11, $12)" :
					   "INSERT INTO dpwin.invocation (invocation_id, route_id, target_id,"
					   " interval_end, window_lo, window_hi, plan, plan_fingerprint,"
					   " config_fingerprint, lease_epoch, caller_role, state, kind)"
					   " VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10, $11, $12, $13)",
					   inv->kind == DPWIN_KIND_REFRESH ? 12 : 13, types, args, NULL, false);

	if (inv->backfill_id != 0)
	{
		Oid			btypes[2] = {UUIDOID, INT8OID};
		Datum		bargs[2] = {args[0], Int64GetDatum(inv->backfill_id)};

		dpwin_catalog_exec("UPDATE dpwin.invocation SET backfill_id = $2"
						   " WHERE invocation_id = $1",
						   2, btypes, bargs, NULL, false);
	}

	foreach(lc, chunks)
	{
		DpwinChunkBounds *c = lfirst(lc);
		Oid			ctypes[4] = {UUIDOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID};
		Datum		cargs[4];

		cargs[0] = args[0];
		cargs[1] = Int32GetDatum(c->chunk_no);
		cargs[2] = TimestampTzGetDatum(c->lo);
		cargs[3] = TimestampTzGetDatum(c->hi);
		dpwin_catalog_exec("INSERT INTO dpwin.chunk (invocation_id, chunk_no, lo, hi)"
						   " VALUES ($1, $2, $3, $4)",
						   4, ctypes, cargs, NULL, false);
	}
}

void
dpwin_registry_transition(const pg_uuid_t *id, DpwinState to, int64 epoch,
						  const char *errmsg_text, const char *sqlstate)
{
	Oid			types[5] = {UUIDOID, TEXTOID, TEXTOID, TEXTOID, BOOLOID};
	Datum		args[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	DpwinState	from;
	int32		target_id;
	int64		inv_epoch;

	args[0] = UUIDPGetDatum(dpwin_uuid_copy(id));
	if (dpwin_catalog_exec("SELECT state, target_id, lease_epoch FROM dpwin.invocation"
						   " WHERE invocation_id = $1 FOR UPDATE",
						   1, types, args, NULL, false) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("dpwin invocation %s does not exist", dpwin_uuid_text(id))));
	from = dpwin_registry_state_from_name(dpwin_catalog_text(0, 1));
	target_id = dpwin_catalog_int32(0, 2);
	inv_epoch = dpwin_catalog_int64(0, 3);

	if (!dpwin_registry_state_may_follow(from, to))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("illegal state transition of dpwin invocation %s: %s -> %s",
						dpwin_uuid_text(id), dpwin_registry_state_name(from),
						dpwin_registry_state_name(to))));

	/*
	 * Fence: the runner must hold the current epoch.  Marking an invocation
	 * failed or expired by someone who holds a newer lease is allowed.
	 */
	dpwin_lease_check_epoch(target_id, epoch);
	if (epoch < inv_epoch)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("epoch %lld is older than invocation %s's epoch %lld: this runner was fenced",
						(long long) epoch, dpwin_uuid_text(id),
						(long long) inv_epoch)));

	args[1] = CStringGetTextDatum(dpwin_registry_state_name(to));
	if (errmsg_text)
		args[2] = CStringGetTextDatum(errmsg_text);
	else
		nulls[2] = 'n';
	if (sqlstate)
		args[3] = CStringGetTextDatum(sqlstate);
	else
		nulls[3] = 'n';
	args[4] = BoolGetDatum(dpwin_registry_state_is_final(to));

	dpwin_catalog_exec("UPDATE dpwin.invocation SET state = $2,"
					   " error = COALESCE($3, error),"
					   " error_sqlstate = COALESCE($4, error_sqlstate),"
					   " updated_at = clock_timestamp(),"
					   " finished_at = CASE WHEN $5 THEN clock_timestamp() END"
					   " WHERE invocation_id = $1",
					   5, types, args, nulls, false);
}

/* UPDATE dpwin.invocation SET <column> = $2 WHERE invocation_id = $1, fenced. */
static void
registry_set_text(const pg_uuid_t *id, int64 epoch, const char *column,
				  const char *value)
{
	Oid			types[2] = {UUIDOID, TEXTOID};
	Datum		args[2];

	args[0] = UUIDPGetDatum(dpwin_uuid_copy(id));
	args[1] = CStringGetTextDatum(value);
	if (epoch >= 0)
	{
		if (dpwin_catalog_exec("SELECT target_id FROM dpwin.invocation WHERE invocation_id = $1",
							   1, types, args, NULL, false) != 1)
			elog(ERROR, "dpwin invocation %s vanished", dpwin_uuid_text(id));
		dpwin_lease_check_epoch(dpwin_catalog_int32(0, 1), epoch);
	}
	dpwin_catalog_exec(psprintf("UPDATE dpwin.invocation SET %s = $2,"
								" updated_at = clock_timestamp()"
								" WHERE invocation_id = $1", column),
					   2, types, args, NULL, false);
}

void
dpwin_registry_set_schema(const pg_uuid_t *id, int64 epoch,
						  const char *schema_fingerprint)
{
	registry_set_text(id, epoch, "schema_fingerprint", schema_fingerprint);
}

void
dpwin_registry_set_snapshot(const pg_uuid_t *id, int64 epoch,
							const char *snapshot_id)
{
	registry_set_text(id, epoch, "snapshot_id", snapshot_id);
}

void
dpwin_registry_set_result(const pg_uuid_t *id, const char *result_json)
{
	Oid			types[2] = {UUIDOID, TEXTOID};
	Datum		args[2];

	args[0] = UUIDPGetDatum(dpwin_uuid_copy(id));
	args[1] = CStringGetTextDatum(result_json);
	dpwin_catalog_exec("UPDATE dpwin.invocation SET result = $2::jsonb"
					   " WHERE invocation_id = $1",
					   2, types, args, NULL, false);
}

char *
dpwin_registry_unsettled_publication(int32 target_id, const pg_uuid_t *except)
{
	Oid			types[2] = {INT4OID, UUIDOID};
	Datum		args[2];

	args[0] = Int32GetDatum(target_id);
	args[1] = UUIDPGetDatum(dpwin_uuid_copy(except));
	if (dpwin_catalog_exec("SELECT i.invocation_id::text FROM dpwin.invocation i"
						   " LEFT JOIN dpwin.publication p USING (invocation_id)"
						   " WHERE i.target_id = $1 AND i.invocation_id <> $2"
						   "   AND (i.state IN ('publishing', 'unknown')"
						   "        OR (p.invocation_id IS NOT NULL"
						   "            AND (p.outcome IS NULL OR p.outcome = 'unknown')))"
						   " ORDER BY i.created_at LIMIT 1",
						   2, types, args, NULL, false) == 0)
		return NULL;
	return dpwin_catalog_text(0, 1);
}

char *
dpwin_registry_published_generation(int32 route_id, int32 target_id)
{
	Oid			types[2] = {INT4OID, INT4OID};
	Datum		args[2];

	/* the route's invocations newest first, by invocation_route_idx */
	args[0] = Int32GetDatum(route_id);
	args[1] = Int32GetDatum(target_id);
	return dpwin_catalog_one_text("SELECT p.generation_uuid::text FROM dpwin.invocation i"
								  " JOIN dpwin.publication p USING (invocation_id)"
								  " WHERE i.route_id = $1 AND p.target_id = $2"
								  "   AND p.outcome = 'published'"
								  " ORDER BY i.created_at DESC LIMIT 1",
								  2, types, args, true);
}

List *
dpwin_registry_orphans(int32 target_id, const pg_uuid_t *except)
{
	Oid			types[3] = {INT4OID, UUIDOID, TEXTOID};
	Datum		args[3];
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext spicxt;
	List	   *orphans = NIL;
	uint64		n;

	args[0] = Int32GetDatum(target_id);
	args[1] = UUIDPGetDatum(dpwin_uuid_copy(except));
	n = dpwin_catalog_exec("SELECT route_id, invocation_id FROM dpwin.invocation"
						   " WHERE target_id = $1 AND invocation_id <> $2"
						   "   AND state IN ('planned', 'extracting')",
						   2, types, args, NULL, true);
	spicxt = MemoryContextSwitchTo(caller);
	for (uint64 i = 0; i < n; i++)
	{
		DpwinOrphan *o = palloc(sizeof(DpwinOrphan));

		o->route_id = dpwin_catalog_int32(i, 1);
		o->id = *dpwin_catalog_uuid(i, 2);
		orphans = lappend(orphans, o);
	}
	MemoryContextSwitchTo(spicxt);
	return orphans;
}

int
dpwin_registry_expire_orphans(int32 target_id, int64 epoch,
							  const pg_uuid_t *except)
{
	Oid			types[5] = {INT4OID, UUIDOID, TEXTOID, TEXTOID, TEXTOID};
	Datum		args[5];

	dpwin_lease_check_epoch(target_id, epoch);
	args[0] = Int32GetDatum(target_id);
	args[1] = UUIDPGetDatum(dpwin_uuid_copy(except));
	args[2] = CStringGetTextDatum(dpwin_registry_state_name(DPWIN_STATE_SNAPSHOT_EXPIRED));
	args[3] = CStringGetTextDatum(DPWIN_SNAPSHOT_GONE);
	args[4] = CStringGetTextDatum(unpack_sql_state(DPWIN_SNAPSHOT_GONE_ERRCODE));
	return (int) dpwin_catalog_exec("UPDATE dpwin.invocation SET state = $3,"
									" error = $4, error_sqlstate = $5,"
									" updated_at = clock_timestamp(), finished_at = clock_timestamp()"
									" WHERE target_id = $1 AND invocation_id <> $2"
									"   AND state IN ('planned', 'extracting')",
									5, types, args, NULL, false);
}

char *
dpwin_registry_digest_key(const pg_uuid_t *id)
{
	return dpwin_catalog_invocation_text("SELECT plan->>'digest_key' FROM dpwin.invocation"
										 " WHERE invocation_id = $1", id, true);
}

/* Columns of dpwin_registry_digest_cache()'s queries. */
#define Anum_cache_invocation_id		1
#define Anum_cache_digest_key			2
#define Anum_cache_schema_fingerprint	3
#define Anum_cache_layout				4
#define Anum_cache_target_uuid			5
#define Anum_cache_chunk_lo				1
#define Anum_cache_chunk_hi				2
#define Anum_cache_chunk_digest			3

DpwinDigestCache *
dpwin_registry_digest_cache(int32 route_id, const char *config_fingerprint)
{
	Oid			types[2] = {INT4OID, TEXTOID};
	Oid			chunk_types[1] = {UUIDOID};
	Datum		args[2];
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext spicxt;
	DpwinDigestCache *cache;
	pg_uuid_t  *id;
	char	   *key;
	int			n;

	/*
	 * The newest evidence, not route_state's invocation: an older window
	 * refreshed later publishes too, and only the newest publication can
	 * describe the target's parts now.  A rollback (whose plan names its
	 * kind; a refresh's names none) digests no chunk: the newest refresh's
	 * digests are taken, and compared with the target only while it is the
	 * generation that refresh put in place (its UUID).
	 */
	args[0] = Int32GetDatum(route_id);
	args[1] = CStringGetTextDatum(config_fingerprint);
	if (dpwin_catalog_exec("SELECT i.invocation_id, i.plan->>'digest_key', i.schema_fingerprint,"
						   " e.metrics->'generation'->>'layout', p.generation_uuid::text"
						   " FROM dpwin.evidence e JOIN dpwin.invocation i USING (invocation_id)"
						   " JOIN dpwin.publication p USING (invocation_id)"
						   " WHERE e.route_id = $1 AND i.config_fingerprint = $2"
						   "   AND i.plan->>'kind' IS NULL"
						   " ORDER BY e.written_at DESC LIMIT 1",
						   2, types, args, NULL, true) != 1)
		return NULL;
	spicxt = MemoryContextSwitchTo(caller);
	cache = palloc0(sizeof(DpwinDigestCache));
	id = dpwin_catalog_uuid(0, Anum_cache_invocation_id);
	key = dpwin_catalog_text(0, Anum_cache_digest_key);
	cache->schema_fingerprint = dpwin_catalog_text(0, Anum_cache_schema_fingerprint);
	cache->layout = dpwin_catalog_text(0, Anum_cache_layout);
	cache->target_uuid = dpwin_catalog_text(0, Anum_cache_target_uuid);
	MemoryContextSwitchTo(spicxt);
	/*
	 * Digests of an older scheme are not compared with new ones: the
	 * refresh digests every chunk under a fresh key, once.
	 */
	if (key == NULL || !dpwin_digest_key_from_text(key, &cache->key) ||
		cache->key.scheme != DPWIN_DIGEST_SCHEME_CURRENT ||
		cache->schema_fingerprint == NULL || cache->layout == NULL ||
		cache->target_uuid == NULL)
		return NULL;

	args[0] = UUIDPGetDatum(id);
	n = (int) dpwin_catalog_exec("SELECT lo, hi, digest FROM dpwin.chunk"
								 " WHERE invocation_id = $1 AND state IN ('verified', 'skipped')"
								 " AND digest IS NOT NULL ORDER BY chunk_no",
								 1, chunk_types, args, NULL, true);
	spicxt = MemoryContextSwitchTo(caller);
	cache->lo = palloc(sizeof(TimestampTz) * Max(n, 1));
	cache->hi = palloc(sizeof(TimestampTz) * Max(n, 1));
	cache->digest = palloc(sizeof(DpwinDigest) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		char	   *v = dpwin_catalog_text(i, Anum_cache_chunk_digest);

		if (!dpwin_digest_from_text(v, &cache->digest[cache->nchunks]))
			continue;
		cache->lo[cache->nchunks] = dpwin_catalog_timestamptz(i, Anum_cache_chunk_lo);
		cache->hi[cache->nchunks] = dpwin_catalog_timestamptz(i, Anum_cache_chunk_hi);
		cache->nchunks++;
	}
	MemoryContextSwitchTo(spicxt);
	return cache;
}

/* For the caller: sees the coordinator's commit. */
char *
dpwin_registry_result(const pg_uuid_t *id)
{
	return dpwin_catalog_invocation_text("SELECT result::text FROM dpwin.invocation"
										 " WHERE invocation_id = $1", id, false);
}

char *
dpwin_registry_unfinished_publication(int32 target_id, const pg_uuid_t *except)
{
	Oid			types[2] = {INT4OID, UUIDOID};
	Datum		args[2];

	args[0] = Int32GetDatum(target_id);
	args[1] = UUIDPGetDatum(dpwin_uuid_copy(except));
	return dpwin_catalog_one_text("SELECT invocation_id::text FROM dpwin.invocation"
								  " WHERE target_id = $1 AND invocation_id <> $2"
								  "   AND state IN ('published', 'evidenced')"
								  " ORDER BY created_at LIMIT 1",
								  2, types, args, false);
}
