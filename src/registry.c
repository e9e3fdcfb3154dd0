/*-------------------------------------------------------------------------
 *
 * registry.c
 *	  The invocation registry, chunk journal, publication intents, evidence
 *	  and route state.
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
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

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
 * Legal predecessors of each state (docs/design.md, "The state machine").  Failure is legal from
 * any state before publishing; from publishing (or unknown) only once the
 * exchange is known not to have happened.  unknown can be settled into
 * published by recovery once the UUIDs show it.
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
dpwin_state_name(DpwinState state)
{
	Assert(state >= 0 && state < DPWIN_NSTATES);
	return state_names[state];
}

DpwinState
dpwin_state_from_name(const char *name)
{
	for (int i = 0; i < DPWIN_NSTATES; i++)
		if (strcmp(state_names[i], name) == 0)
			return (DpwinState) i;
	elog(ERROR, "unknown dpwin invocation state \"%s\"", name);
	return DPWIN_STATE_FAILED;	/* keep compiler quiet */
}

static const char *const outcome_names[] = {
	[DPWIN_OUTCOME_NONE] = "none",
	[DPWIN_OUTCOME_PUBLISHED] = "published",
	[DPWIN_OUTCOME_NOT_PUBLISHED] = "not_published",
	[DPWIN_OUTCOME_UNKNOWN] = "unknown",
	[DPWIN_OUTCOME_PENDING] = "pending",
};

const char *
dpwin_outcome_name(DpwinOutcome outcome)
{
	Assert(outcome >= DPWIN_OUTCOME_NONE && outcome <= DPWIN_OUTCOME_PENDING);
	return outcome_names[outcome];
}

bool
dpwin_state_is_final(DpwinState state)
{
	return (FINAL_STATES & (1u << state)) != 0;
}

bool
dpwin_state_may_follow(DpwinState from, DpwinState to)
{
	return (legal_predecessors[to] & (1u << from)) != 0;
}

char *
dpwin_uuid_text(const pg_uuid_t *id)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(id)));
}

static pg_uuid_t *
uuid_copy(const pg_uuid_t *id)
{
	pg_uuid_t  *c = palloc(sizeof(pg_uuid_t));

	memcpy(c, id, sizeof(pg_uuid_t));
	return c;
}

/*
 * Typed getters of the columns of the last catalog query's rows, by the
 * Anum_* constants of its select list.  A NOT NULL column found null is a
 * corrupt catalog: elog.
 */
static Datum
get_not_null(uint64 row, int col)
{
	bool		isnull;
	Datum		d = dpwin_catalog_value(row, col, &isnull);

	if (isnull)
		elog(ERROR, "dpwin: column %d of a catalog row is null", col);
	return d;
}

static int32
get_int32(uint64 row, int col)
{
	return DatumGetInt32(get_not_null(row, col));
}

static int64
get_int64(uint64 row, int col)
{
	return DatumGetInt64(get_not_null(row, col));
}

/* A nullable bigint: `if_null` when null. */
static int64
get_int64_or(uint64 row, int col, int64 if_null)
{
	bool		isnull;
	Datum		d = dpwin_catalog_value(row, col, &isnull);

	return isnull ? if_null : DatumGetInt64(d);
}

static Oid
get_oid(uint64 row, int col)
{
	return DatumGetObjectId(get_not_null(row, col));
}

/* A nullable timestamptz: -infinity when null. */
static TimestampTz
get_timestamptz(uint64 row, int col)
{
	bool		isnull;
	Datum		d = dpwin_catalog_value(row, col, &isnull);

	return isnull ? DT_NOBEGIN : DatumGetTimestampTz(d);
}

static pg_uuid_t *
get_uuid(uint64 row, int col)
{
	return uuid_copy(DatumGetUUIDP(get_not_null(row, col)));
}

/* A text column, palloc'd; NULL when null. */
static char *
get_text(uint64 row, int col)
{
	return dpwin_catalog_text(row, col);
}

/*
 * The one text column of the one row that `sql` selects, in the caller's
 * memory context (SPI leaves its own current); NULL when there is no such
 * row, or the value is null.
 */
static char *
one_text(const char *sql, int nargs, Oid *types, Datum *args, bool read_only)
{
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext spicxt;
	char	   *text;

	if (dpwin_catalog_exec(sql, nargs, types, args, NULL, read_only) != 1)
		return NULL;
	spicxt = MemoryContextSwitchTo(caller);
	text = get_text(0, 1);
	MemoryContextSwitchTo(spicxt);
	return text;
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
						   " error, error_sqlstate, caller_role"
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
	inv->route_id = get_int32(0, Anum_invocation_route_id);
	inv->target_id = get_int32(0, Anum_invocation_target_id);
	inv->interval_end = get_timestamptz(0, Anum_invocation_interval_end);
	inv->window_lo = get_timestamptz(0, Anum_invocation_window_lo);
	inv->window_hi = get_timestamptz(0, Anum_invocation_window_hi);
	inv->plan = get_text(0, Anum_invocation_plan);
	inv->plan_fingerprint = get_text(0, Anum_invocation_plan_fingerprint);
	inv->config_fingerprint = get_text(0, Anum_invocation_config_fingerprint);
	inv->schema_fingerprint = get_text(0, Anum_invocation_schema_fingerprint);
	inv->snapshot_id = get_text(0, Anum_invocation_snapshot_id);
	inv->lease_epoch = get_int64(0, Anum_invocation_lease_epoch);
	inv->state = dpwin_state_from_name(get_text(0, Anum_invocation_state));
	inv->error = get_text(0, Anum_invocation_error);
	inv->error_sqlstate = get_text(0, Anum_invocation_error_sqlstate);
	inv->caller_role = get_oid(0, Anum_invocation_caller_role);
	MemoryContextSwitchTo(spicxt);
	return inv;
}

void
dpwin_registry_create(const DpwinInvocation *inv, List *chunks)
{
	Oid			types[12] = {
		UUIDOID, INT4OID, INT4OID, TIMESTAMPTZOID,
		TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, TEXTOID, TEXTOID, INT8OID,
		OIDOID, TEXTOID
	};
	Datum		args[12];
	ListCell   *lc;

	dpwin_lease_check_epoch(inv->target_id, inv->lease_epoch);

	args[0] = UUIDPGetDatum(uuid_copy(&inv->id));
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
	args[11] = CStringGetTextDatum(dpwin_state_name(DPWIN_STATE_PLANNED));
	dpwin_catalog_exec("INSERT INTO dpwin.invocation (invocation_id, route_id, target_id,"
					   " interval_end, window_lo, window_hi, plan, plan_fingerprint,"
					   " config_fingerprint, lease_epoch, caller_role, state)"
					   " VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10, $11, $12)",
					   12, types, args, NULL, false);
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

	args[0] = UUIDPGetDatum(uuid_copy(id));
	if (dpwin_catalog_exec("SELECT state, target_id, lease_epoch FROM dpwin.invocation"
						   " WHERE invocation_id = $1 FOR UPDATE",
						   1, types, args, NULL, false) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("dpwin invocation %s does not exist", dpwin_uuid_text(id))));
	from = dpwin_state_from_name(get_text(0, 1));
	target_id = get_int32(0, 2);
	inv_epoch = get_int64(0, 3);

	if (!dpwin_state_may_follow(from, to))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("illegal state transition of dpwin invocation %s: %s -> %s",
						dpwin_uuid_text(id), dpwin_state_name(from),
						dpwin_state_name(to))));

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

	args[1] = CStringGetTextDatum(dpwin_state_name(to));
	if (errmsg_text)
		args[2] = CStringGetTextDatum(errmsg_text);
	else
		nulls[2] = 'n';
	if (sqlstate)
		args[3] = CStringGetTextDatum(sqlstate);
	else
		nulls[3] = 'n';
	args[4] = BoolGetDatum(dpwin_state_is_final(to));

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

	args[0] = UUIDPGetDatum(uuid_copy(id));
	args[1] = CStringGetTextDatum(value);
	if (epoch >= 0)
	{
		if (dpwin_catalog_exec("SELECT target_id FROM dpwin.invocation WHERE invocation_id = $1",
							   1, types, args, NULL, false) != 1)
			elog(ERROR, "dpwin invocation %s vanished", dpwin_uuid_text(id));
		dpwin_lease_check_epoch(get_int32(0, 1), epoch);
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

	args[0] = UUIDPGetDatum(uuid_copy(id));
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
	args[1] = UUIDPGetDatum(uuid_copy(except));
	if (dpwin_catalog_exec("SELECT i.invocation_id::text FROM dpwin.invocation i"
						   " LEFT JOIN dpwin.publication p USING (invocation_id)"
						   " WHERE i.target_id = $1 AND i.invocation_id <> $2"
						   "   AND (i.state IN ('publishing', 'unknown')"
						   "        OR (p.invocation_id IS NOT NULL"
						   "            AND (p.outcome IS NULL OR p.outcome = 'unknown')))"
						   " ORDER BY i.created_at LIMIT 1",
						   2, types, args, NULL, false) == 0)
		return NULL;
	return get_text(0, 1);
}

char *
dpwin_registry_published_generation(int32 route_id, int32 target_id)
{
	Oid			types[2] = {INT4OID, INT4OID};
	Datum		args[2];

	/* the route's invocations newest first, by invocation_route_idx */
	args[0] = Int32GetDatum(route_id);
	args[1] = Int32GetDatum(target_id);
	return one_text("SELECT p.generation_uuid::text FROM dpwin.invocation i"
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
	args[1] = UUIDPGetDatum(uuid_copy(except));
	n = dpwin_catalog_exec("SELECT route_id, invocation_id FROM dpwin.invocation"
						   " WHERE target_id = $1 AND invocation_id <> $2"
						   "   AND state IN ('planned', 'extracting')",
						   2, types, args, NULL, true);
	spicxt = MemoryContextSwitchTo(caller);
	for (uint64 i = 0; i < n; i++)
	{
		DpwinOrphan *o = palloc(sizeof(DpwinOrphan));

		o->route_id = get_int32(i, 1);
		o->id = *get_uuid(i, 2);
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
	args[1] = UUIDPGetDatum(uuid_copy(except));
	args[2] = CStringGetTextDatum(dpwin_state_name(DPWIN_STATE_SNAPSHOT_EXPIRED));
	args[3] = CStringGetTextDatum(DPWIN_SNAPSHOT_GONE);
	args[4] = CStringGetTextDatum(unpack_sql_state(DPWIN_SNAPSHOT_GONE_ERRCODE));
	return (int) dpwin_catalog_exec("UPDATE dpwin.invocation SET state = $3,"
									" error = $4, error_sqlstate = $5,"
									" updated_at = clock_timestamp(), finished_at = clock_timestamp()"
									" WHERE target_id = $1 AND invocation_id <> $2"
									"   AND state IN ('planned', 'extracting')",
									5, types, args, NULL, false);
}

void
dpwin_chunk_begin(const pg_uuid_t *id, int chunk_no, int attempt,
				  const char *staging_table, int32 target_id, int64 epoch)
{
	Oid			types[5] = {UUIDOID, INT4OID, INT4OID, TEXTOID, INT8OID};
	Datum		args[5];
	char		nulls[6] = "     ";

	dpwin_lease_check_epoch(target_id, epoch);
	args[0] = UUIDPGetDatum(uuid_copy(id));
	args[1] = Int32GetDatum(chunk_no);
	args[2] = Int32GetDatum(attempt);
	if (staging_table)
		args[3] = CStringGetTextDatum(staging_table);
	else
		nulls[3] = 'n';
	args[4] = Int64GetDatum(epoch);
	if (dpwin_catalog_exec(psprintf("UPDATE dpwin.chunk SET attempt = $3, state = 'running',"
									" staging_table = $4, lease_epoch = $5, worker_pid = %d,"
									" rows = NULL, bytes = NULL, digest = NULL, error = NULL,"
									" started_at = clock_timestamp(), finished_at = NULL"
									" WHERE invocation_id = $1 AND chunk_no = $2"
									"   AND state IN ('pending', 'fenced', 'running', 'failed')",
									MyProcPid),
						   5, types, args, nulls, false) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("chunk %d of dpwin invocation %s cannot start a new attempt",
						chunk_no, dpwin_uuid_text(id))));
}

void
dpwin_chunk_end(const pg_uuid_t *id, int chunk_no, int attempt,
				const char *state, int64 rows, int64 bytes,
				const DpwinDigest *digest, const char *error,
				int32 target_id, int64 epoch)
{
	Oid			types[7] = {UUIDOID, INT4OID, INT4OID, TEXTOID, INT8OID, INT8OID, TEXTOID};
	Datum		args[8];
	char		nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	Oid			types8[8];

	dpwin_lease_check_epoch(target_id, epoch);
	memcpy(types8, types, sizeof(types));
	types8[7] = TEXTOID;
	args[0] = UUIDPGetDatum(uuid_copy(id));
	args[1] = Int32GetDatum(chunk_no);
	args[2] = Int32GetDatum(attempt);
	args[3] = CStringGetTextDatum(state);
	args[4] = Int64GetDatum(rows);
	args[5] = Int64GetDatum(bytes);
	if (digest)
		args[6] = CStringGetTextDatum(dpwin_digest_to_text(digest));
	else
		nulls[6] = 'n';
	if (error)
		args[7] = CStringGetTextDatum(error);
	else
		nulls[7] = 'n';
	if (dpwin_catalog_exec("UPDATE dpwin.chunk SET state = $4, rows = $5, bytes = $6,"
						   " digest = $7, error = $8, finished_at = clock_timestamp()"
						   " WHERE invocation_id = $1 AND chunk_no = $2 AND attempt = $3",
						   8, types8, args, nulls, false) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("attempt %d of chunk %d of dpwin invocation %s is no longer current",
						attempt, chunk_no, dpwin_uuid_text(id))));
}

void
dpwin_publication_intent(const pg_uuid_t *id, int32 target_id, int64 epoch,
						 const DpwinPublication *pub,
						 const char *exchange_query_id)
{
	Oid			types[8] = {
		UUIDOID, INT4OID, UUIDOID, TEXTOID, UUIDOID, TEXTOID,
		INT8OID, TEXTOID
	};
	Datum		args[8];

	dpwin_lease_check_epoch(target_id, epoch);
	args[0] = UUIDPGetDatum(uuid_copy(id));
	args[1] = Int32GetDatum(target_id);
	args[2] = DirectFunctionCall1(uuid_in, CStringGetDatum(pub->target_uuid_before));
	args[3] = CStringGetTextDatum(pub->generation_table);
	args[4] = DirectFunctionCall1(uuid_in, CStringGetDatum(pub->generation_uuid));
	args[5] = CStringGetTextDatum(pub->backup_table);
	args[6] = Int64GetDatum(epoch);
	args[7] = CStringGetTextDatum(exchange_query_id);
	dpwin_catalog_exec("INSERT INTO dpwin.publication (invocation_id, target_id,"
					   " target_uuid_before, generation_table, generation_uuid,"
					   " backup_table, lease_epoch, exchange_query_id)"
					   " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
					   " ON CONFLICT (invocation_id) DO UPDATE SET"
					   "   target_uuid_before = EXCLUDED.target_uuid_before,"
					   "   generation_table = EXCLUDED.generation_table,"
					   "   generation_uuid = EXCLUDED.generation_uuid,"
					   "   backup_table = EXCLUDED.backup_table,"
					   "   lease_epoch = EXCLUDED.lease_epoch,"
					   "   exchange_query_id = EXCLUDED.exchange_query_id,"
					   "   intent_at = clock_timestamp(), outcome = NULL, observed_at = NULL"
					   " WHERE dpwin.publication.outcome IS DISTINCT FROM 'published'",
					   8, types, args, NULL, false);
}

DpwinOutcome
dpwin_publication_judge(const DpwinPublication *pub, const char *target_uuid,
						const char *generation_uuid)
{
	if (target_uuid && strcmp(target_uuid, pub->generation_uuid) == 0)
		return DPWIN_OUTCOME_PUBLISHED;
	if (target_uuid && strcmp(target_uuid, pub->target_uuid_before) == 0 &&
		generation_uuid && strcmp(generation_uuid, pub->generation_uuid) == 0)
		return DPWIN_OUTCOME_NOT_PUBLISHED;
	return DPWIN_OUTCOME_UNKNOWN;
}

/* Columns of dpwin_publication_load()'s query. */
#define Anum_publication_target_uuid_before	1
#define Anum_publication_generation_table	2
#define Anum_publication_generation_uuid	3
#define Anum_publication_backup_table		4
#define Anum_publication_outcome			5
#define Anum_publication_lease_epoch		6
#define Anum_publication_exchange_query_id	7

DpwinPublication *
dpwin_publication_load(const pg_uuid_t *id)
{
	Oid			types[1] = {UUIDOID};
	Datum		args[1];
	DpwinPublication *pub;
	char	   *outcome;
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext spicxt;

	args[0] = UUIDPGetDatum(uuid_copy(id));
	if (dpwin_catalog_exec("SELECT target_uuid_before::text, generation_table,"
						   " generation_uuid::text, backup_table, outcome, lease_epoch,"
						   " exchange_query_id"
						   " FROM dpwin.publication WHERE invocation_id = $1",
						   1, types, args, NULL, false) != 1)
		return NULL;
	/* in the caller's context: SPI_finish frees SPI's (see above) */
	spicxt = MemoryContextSwitchTo(caller);
	pub = palloc0(sizeof(DpwinPublication));
	pub->target_uuid_before = get_text(0, Anum_publication_target_uuid_before);
	pub->generation_table = get_text(0, Anum_publication_generation_table);
	pub->generation_uuid = get_text(0, Anum_publication_generation_uuid);
	pub->backup_table = get_text(0, Anum_publication_backup_table);
	outcome = get_text(0, Anum_publication_outcome);
	pub->outcome = DPWIN_OUTCOME_NONE;
	for (int o = DPWIN_OUTCOME_PUBLISHED; outcome && o <= DPWIN_OUTCOME_UNKNOWN; o++)
		if (strcmp(outcome, dpwin_outcome_name((DpwinOutcome) o)) == 0)
			pub->outcome = (DpwinOutcome) o;
	pub->lease_epoch = get_int64(0, Anum_publication_lease_epoch);
	pub->exchange_query_id = get_text(0, Anum_publication_exchange_query_id);
	MemoryContextSwitchTo(spicxt);
	return pub;
}

void
dpwin_publication_outcome(const pg_uuid_t *id, int32 target_id, int64 epoch,
						  DpwinOutcome outcome)
{
	Oid			types[2] = {UUIDOID, TEXTOID};
	Datum		args[2];

	Assert(outcome != DPWIN_OUTCOME_NONE && outcome != DPWIN_OUTCOME_PENDING);
	dpwin_lease_check_epoch(target_id, epoch);
	args[0] = UUIDPGetDatum(uuid_copy(id));
	args[1] = CStringGetTextDatum(dpwin_outcome_name(outcome));
	dpwin_catalog_exec("UPDATE dpwin.publication SET outcome = $2,"
					   " observed_at = clock_timestamp()"
					   " WHERE invocation_id = $1",
					   2, types, args, NULL, false);
}

bool
dpwin_evidence_write(const pg_uuid_t *id, int32 route_id, int32 target_id,
					 int64 epoch, const char *metrics_json,
					 Oid evidence_function)
{
	Oid			types[4] = {UUIDOID, INT4OID, INT8OID, TEXTOID};
	Datum		args[4];
	uint64		inserted;

	dpwin_lease_check_epoch(target_id, epoch);
	args[0] = UUIDPGetDatum(uuid_copy(id));
	args[1] = Int32GetDatum(route_id);
	args[2] = Int64GetDatum(epoch);
	args[3] = CStringGetTextDatum(metrics_json);
	inserted = dpwin_catalog_exec("INSERT INTO dpwin.evidence (invocation_id, route_id,"
								  " lease_epoch, metrics)"
								  " VALUES ($1, $2, $3, $4::jsonb)"
								  " ON CONFLICT (invocation_id) DO NOTHING",
								  4, types, args, NULL, false);

	/*
	 * The route's evidence function runs in this same transaction, with the
	 * caller's privileges, so that its record and dpwin's commit together or
	 * not at all.
	 */
	if (inserted > 0 && OidIsValid(evidence_function))
	{
		Datum		metrics = DirectFunctionCall1(jsonb_in,
												  CStringGetDatum(metrics_json));

		FmgrInfo	flinfo;

		LOCAL_FCINFO(fcinfo, 2);

		/* Its result, even a NULL one (a void SQL function), is ignored. */
		fmgr_info(evidence_function, &flinfo);
		InitFunctionCallInfoData(*fcinfo, &flinfo, 2, InvalidOid, NULL, NULL);
		fcinfo->args[0].value = args[0];
		fcinfo->args[0].isnull = false;
		fcinfo->args[1].value = metrics;
		fcinfo->args[1].isnull = false;
		(void) FunctionCallInvoke(fcinfo);
	}
	return inserted > 0;
}

void
dpwin_route_state_advance(int32 route_id, TimestampTz interval_end,
						  const pg_uuid_t *id, int32 target_id, int64 epoch)
{
	Oid			types[3] = {INT4OID, TIMESTAMPTZOID, UUIDOID};
	Datum		args[3];

	dpwin_lease_check_epoch(target_id, epoch);
	args[0] = Int32GetDatum(route_id);
	args[1] = TimestampTzGetDatum(interval_end);
	args[2] = UUIDPGetDatum(uuid_copy(id));

	/* Never backwards: an older window refreshed later leaves it alone. */
	dpwin_catalog_exec("INSERT INTO dpwin.route_state (route_id, last_interval_end, invocation_id)"
					   " VALUES ($1, $2, $3)"
					   " ON CONFLICT (route_id) DO UPDATE SET"
					   "   last_interval_end = EXCLUDED.last_interval_end,"
					   "   invocation_id = EXCLUDED.invocation_id,"
					   "   updated_at = clock_timestamp()"
					   " WHERE dpwin.route_state.last_interval_end < EXCLUDED.last_interval_end",
					   3, types, args, NULL, false);
}

/*
 * The one text column of the one row that `sql` selects for invocation
 * $1; NULL when there is none, or it is null.  Not read_only: a new
 * snapshot, which sees what a coordinator has committed meanwhile.
 */
static char *
text_of_invocation(const char *sql, const pg_uuid_t *id, bool read_only)
{
	Oid			types[1] = {UUIDOID};
	Datum		args[1];

	args[0] = UUIDPGetDatum(uuid_copy(id));
	return one_text(sql, 1, types, args, read_only);
}

char *
dpwin_registry_digest_key(const pg_uuid_t *id)
{
	return text_of_invocation("SELECT plan->>'digest_key' FROM dpwin.invocation"
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
	 * describe the target's parts now.
	 */
	args[0] = Int32GetDatum(route_id);
	args[1] = CStringGetTextDatum(config_fingerprint);
	if (dpwin_catalog_exec("SELECT i.invocation_id, i.plan->>'digest_key', i.schema_fingerprint,"
						   " e.metrics->'generation'->>'layout', p.generation_uuid::text"
						   " FROM dpwin.evidence e JOIN dpwin.invocation i USING (invocation_id)"
						   " JOIN dpwin.publication p USING (invocation_id)"
						   " WHERE e.route_id = $1 AND i.config_fingerprint = $2"
						   " ORDER BY e.written_at DESC LIMIT 1",
						   2, types, args, NULL, true) != 1)
		return NULL;
	spicxt = MemoryContextSwitchTo(caller);
	cache = palloc0(sizeof(DpwinDigestCache));
	id = get_uuid(0, Anum_cache_invocation_id);
	key = get_text(0, Anum_cache_digest_key);
	cache->schema_fingerprint = get_text(0, Anum_cache_schema_fingerprint);
	cache->layout = get_text(0, Anum_cache_layout);
	cache->target_uuid = get_text(0, Anum_cache_target_uuid);
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
		char	   *v = get_text(i, Anum_cache_chunk_digest);

		if (!dpwin_digest_from_text(v, &cache->digest[cache->nchunks]))
			continue;
		cache->lo[cache->nchunks] = get_timestamptz(i, Anum_cache_chunk_lo);
		cache->hi[cache->nchunks] = get_timestamptz(i, Anum_cache_chunk_hi);
		cache->nchunks++;
	}
	MemoryContextSwitchTo(spicxt);
	return cache;
}

/* Columns of dpwin_chunk_load()'s query of dpwin.chunk. */
#define Anum_chunk_chunk_no			1
#define Anum_chunk_state			2
#define Anum_chunk_staging_table	3
#define Anum_chunk_rows				4
#define Anum_chunk_bytes			5
#define Anum_chunk_digest			6
#define Anum_chunk_attempts			7
#define Anum_chunk_lo				8
#define Anum_chunk_hi				9

DpwinChunkSlot *
dpwin_chunk_load(const pg_uuid_t *id, int *nchunks)
{
	Oid			types[1] = {UUIDOID};
	Datum		args[1];
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext spicxt;
	DpwinChunkSlot *slots;
	int			n;

	args[0] = UUIDPGetDatum(uuid_copy(id));
	n = (int) dpwin_catalog_exec("SELECT chunk_no, state, staging_table, rows, bytes,"
								 " digest, attempt + 1, lo, hi"
								 " FROM dpwin.chunk WHERE invocation_id = $1 ORDER BY chunk_no",
								 1, types, args, NULL, true);
	/* in the caller's context: SPI_finish frees SPI's */
	spicxt = MemoryContextSwitchTo(caller);
	slots = palloc0(sizeof(DpwinChunkSlot) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		DpwinChunkSlot *s = &slots[i];
		char	   *v;

		s->chunk_no = get_int32(i, Anum_chunk_chunk_no);
		v = get_text(i, Anum_chunk_state);
		s->result = strcmp(v, "verified") == 0 ? DPWIN_CHUNK_VERIFIED :
			strcmp(v, "skipped") == 0 ? DPWIN_CHUNK_SKIPPED : DPWIN_CHUNK_FAILED;
		if ((v = get_text(i, Anum_chunk_staging_table)) != NULL)
			strlcpy(s->staging_table, v, sizeof(s->staging_table));
		s->rows = (uint64) get_int64_or(i, Anum_chunk_rows, 0);
		s->bytes = (uint64) get_int64_or(i, Anum_chunk_bytes, 0);
		if ((v = get_text(i, Anum_chunk_digest)) != NULL)
			(void) dpwin_digest_from_text(v, &s->digest);
		s->attempts = get_int32(i, Anum_chunk_attempts);
		s->lo = get_timestamptz(i, Anum_chunk_lo);
		s->hi = get_timestamptz(i, Anum_chunk_hi);
	}
	MemoryContextSwitchTo(spicxt);
	*nchunks = n;
	return slots;
}

/* The metrics of an invocation's evidence, as jsonb text; NULL when none. */
char *
dpwin_evidence_metrics(const pg_uuid_t *id)
{
	return text_of_invocation("SELECT metrics::text FROM dpwin.evidence"
							  " WHERE invocation_id = $1", id, true);
}

void
dpwin_verification_record(const DpwinVerification *v)
{
	Oid			types[11] = {
		UUIDOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID,
		TIMESTAMPTZOID, TEXTOID, UUIDOID, TEXTOID, INT4OID, OIDOID, TIMESTAMPTZOID
	};
	Datum		args[11];

	args[0] = UUIDPGetDatum(uuid_copy(&v->id));
	args[1] = Int32GetDatum(v->route_id);
	args[2] = TimestampTzGetDatum(v->interval_end);
	args[3] = TimestampTzGetDatum(v->window_lo);
	args[4] = TimestampTzGetDatum(v->window_hi);
	args[5] = CStringGetTextDatum(v->snapshot_id);
	args[6] = DirectFunctionCall1(uuid_in, CStringGetDatum(v->target_uuid));
	args[7] = CStringGetTextDatum(v->chunks_json);
	args[8] = Int32GetDatum(v->drifting_chunks);
	args[9] = ObjectIdGetDatum(v->caller_role);
	args[10] = TimestampTzGetDatum(v->started_at);
	dpwin_catalog_exec("INSERT INTO dpwin.verification (verification_id, route_id,"
					   " interval_end, window_lo, window_hi, snapshot_id, target_uuid,"
					   " chunks, drifting_chunks, caller_role, started_at)"
					   " VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11)",
					   11, types, args, NULL, false);
}

/* For the caller: sees the coordinator's commit. */
char *
dpwin_registry_result(const pg_uuid_t *id)
{
	return text_of_invocation("SELECT result::text FROM dpwin.invocation"
							  " WHERE invocation_id = $1", id, false);
}

/* Columns of dpwin_verification_chunks()'s query: its result rows. */
#define Natts_verification_chunk	6

void
dpwin_verification_chunks(const pg_uuid_t *id, Tuplestorestate *tupstore,
						  TupleDesc desc)
{
	Oid			types[1] = {UUIDOID};
	Datum		args[1];
	uint64		n;

	args[0] = UUIDPGetDatum(uuid_copy(id));
	/* not read-only: a new snapshot, which sees the coordinator's commit */
	n = dpwin_catalog_exec("SELECT c.chunk_no, c.lo, c.hi, c.source_rows, c.target_rows, c.matches"
						   " FROM dpwin.verification v,"
						   " jsonb_to_recordset(v.chunks) AS c(chunk_no integer, lo timestamptz,"
						   "   hi timestamptz, source_rows bigint, target_rows bigint, matches boolean)"
						   " WHERE v.verification_id = $1 ORDER BY c.chunk_no",
						   1, types, args, NULL, false);
	for (uint64 i = 0; i < n; i++)
	{
		Datum		values[Natts_verification_chunk];
		bool		nulls[Natts_verification_chunk];

		for (int col = 0; col < Natts_verification_chunk; col++)
			values[col] = dpwin_catalog_value(i, col + 1, &nulls[col]);
		tuplestore_putvalues(tupstore, desc, values, nulls);
	}
}

List *
dpwin_publication_backups(int32 route_id)
{
	Oid			types[1] = {INT4OID};
	Datum		args[1];
	List	   *names = NIL;
	uint64		n;

	args[0] = Int32GetDatum(route_id);
	n = dpwin_catalog_exec("SELECT p.backup_table FROM dpwin.publication p"
						   " JOIN dpwin.invocation i USING (invocation_id)"
						   " WHERE i.route_id = $1 AND p.outcome = 'published'"
						   " ORDER BY p.intent_at DESC",
						   1, types, args, NULL, true);
	for (uint64 i = 0; i < n; i++)
		names = lappend(names, get_text(i, 1));
	return names;
}
