/*-------------------------------------------------------------------------
 *
 * refresh.c
 *	  The SQL entry points of a refresh and of recovery from psql:
 *	  dpwin_refresh(), dpwin.recover(), dpwin.abandon(), dpwin.reconcile(),
 *	  dpwin.rollback(), dpwin.drop_backups(), dpwin.lock_target() and
 *	  dpwin.unlock_target().
 *
 *	  Each call is admitted here, in the caller's backend, before any I/O:
 *	  the route exists, the caller may run it, the arguments are valid.
 *	  The work itself runs in a coordinator background worker
 *	  (coordinator.c); the read-only and clean-up calls talk to ClickHouse
 *	  from here.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/fmgrprotos.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "catalog.h"
#include "chclient.h"
#include "call.h"
#include "fdw.h"
#include "lease.h"
#include "names.h"
#include "publication.h"
#include "registry.h"
#include "retention.h"
#include "route.h"
#include "target.h"
#include "verification.h"
#include "version.h"
#include "window.h"

PG_FUNCTION_INFO_V1(dpwin_refresh);
PG_FUNCTION_INFO_V1(dpwin_recover);
PG_FUNCTION_INFO_V1(dpwin_abandon);
PG_FUNCTION_INFO_V1(dpwin_reconcile);
PG_FUNCTION_INFO_V1(dpwin_drop_backups);
PG_FUNCTION_INFO_V1(dpwin_lock_target);
PG_FUNCTION_INFO_V1(dpwin_unlock_target);
PG_FUNCTION_INFO_V1(dpwin_verify);
PG_FUNCTION_INFO_V1(dpwin_backfill_window);
PG_FUNCTION_INFO_V1(dpwin_rollback);

/* Load an invocation and its route, and check the caller owns the route. */
static DpwinRoute *
invocation_route_for_owner(const pg_uuid_t *id, const char *action,
						   DpwinInvocation **inv_out)
{
	DpwinInvocation *inv;
	DpwinRoute *route;
	MemoryContext cxt = CurrentMemoryContext;

	dpwin_check_sql_version();
	SPI_connect();
	inv = dpwin_registry_load(id, false);
	MemoryContextSwitchTo(cxt);
	inv = memcpy(palloc(sizeof(DpwinInvocation)), inv, sizeof(DpwinInvocation));
	SPI_finish();
	route = dpwin_route_load_by_id(inv->route_id);
	dpwin_route_check_owner(route, action);
	if (inv_out)
		*inv_out = inv;
	return route;
}

/*
 * The window must lie inside what the target's DateTime64 window column
 * can hold, 1900-01-01 00:00:00 .. 2299-12-31 23:59:59.999999 UTC.  Outside
 * it no row can be copied, and a bound that far out does not even convert
 * to Unix microseconds: refuse here, before anything is journaled or sent.
 */
static void
check_window_range(const DpwinRoute *route, List *chunks)
{
	TimestampTz lo = ((DpwinChunkBounds *) linitial(chunks))->lo;
	TimestampTz hi = ((DpwinChunkBounds *) llast(chunks))->hi;
	TimestampTz min = (TimestampTz) (date2j(1900, 1, 1) - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY;
	TimestampTz max = (TimestampTz) (date2j(2300, 1, 1) - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY;

	if (lo < min || hi > max)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("window [%s, %s) of route \"%s\" is outside the range of ClickHouse DateTime64",
						dpwin_timestamp_utc(lo), dpwin_timestamp_utc(hi),
						route->route_name),
				 errdetail("DateTime64 holds 1900-01-01 00:00:00 .. 2299-12-31 23:59:59.999999 UTC; the whole window must lie inside it.")));
}

/*
 * Admission of a call on a route's window, before any I/O: the arguments,
 * the route and the caller's right to run it, the server, the window's
 * range, and the route's binding to its source.
 */
static DpwinRoute *
admit_window_call(FunctionCallInfo fcinfo, TimestampTz *interval_end)
{
	DpwinRoute *route;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("route must not be NULL")));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("interval_end must not be NULL"),
				 errdetail("dpwin has no wall-clock fallback: the window is [interval_end - lookback, interval_end)."),
				 errhint("Pass the end of the interval to refresh, e.g. '2026-09-09 00:00:00+00'.")));
	*interval_end = PG_GETARG_TIMESTAMPTZ(1);
	if (TIMESTAMP_NOT_FINITE(*interval_end))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("interval_end must be finite")));

	route = dpwin_route_load(text_to_cstring(PG_GETARG_TEXT_PP(0)), false);
	dpwin_route_check_can_refresh(route);
	(void) dpwin_server_conf(route->server_name, GetUserId());
	check_window_range(route, dpwin_window_chunks(*interval_end, route->lookback_us,
												  route->chunk_us));

	/*
	 * The route binds its name to its source configuration: a source that was
	 * renamed or whose columns changed type since the route was declared is
	 * not silently followed.
	 */
	if (strcmp(dpwin_route_fingerprint(route), route->config_fingerprint) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the source of route \"%s\" changed since the route was declared",
						route->route_name),
				 errdetail("The route's config fingerprint no longer matches its source table, columns or target."),
				 errhint("Review the source, then confirm the route with SELECT dpwin.alter_route('%s');",
						 route->route_name)));
	return route;
}

Datum
dpwin_refresh(PG_FUNCTION_ARGS)
{
	DpwinCallShared *call = palloc(sizeof(DpwinCallShared));
	DpwinRoute *route;
	TimestampTz interval_end;

	/* Admission, before any I/O. */
	route = admit_window_call(fcinfo, &interval_end);
	dpwin_call_init(call, DPWIN_CALL_REFRESH);
	call->route_id = route->route_id;
	call->interval_end = interval_end;

	if (!PG_ARGISNULL(2))
	{
		pg_uuid_t  *id = PG_GETARG_UUID_P(2);
		DpwinInvocation *inv;
		MemoryContext cxt = CurrentMemoryContext;

		call->invocation_id = *id;
		SPI_connect();
		inv = dpwin_registry_load(id, true);
		MemoryContextSwitchTo(cxt);
		if (inv)
		{
			if (inv->route_id != route->route_id || inv->interval_end != interval_end)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("invocation %s belongs to another route or interval_end",
								dpwin_uuid_text(id)),
						 errhint("Recover it with SELECT * FROM dpwin.recover('%s').",
								 dpwin_uuid_text(id))));
			/* Reusing an invocation id is recovery: the route owner's call. */
			dpwin_route_check_owner(route, "recover");
			call->mode = DPWIN_CALL_RECOVER;
		}
		SPI_finish();
	}
	else
	{
		Datum		id = DirectFunctionCall1(gen_random_uuid, (Datum) 0);

		memcpy(&call->invocation_id, DatumGetUUIDP(id), sizeof(pg_uuid_t));
	}

	dpwin_run_coordinator(call);
	PG_RETURN_DATUM(dpwin_call_result(fcinfo, call));
}

/*
 * dpwin.backfill_window(route, interval_end, backfill): one window of
 * CALL dpwin.backfill(), admitted and run as any refresh, its invocation
 * journaled as the backfill's.  The backfill must be running on this route
 * with the route's lookback: its windows are that lookback's tiling.
 */
Datum
dpwin_backfill_window(PG_FUNCTION_ARGS)
{
	DpwinCallShared *call = palloc(sizeof(DpwinCallShared));
	DpwinRoute *route;
	TimestampTz interval_end;
	int64		backfill;
	Oid			types[2] = {INT8OID, INT4OID};
	Datum		args[2];
	uint64		found;

	route = admit_window_call(fcinfo, &interval_end);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("backfill must not be NULL")));
	backfill = PG_GETARG_INT64(2);
	args[0] = Int64GetDatum(backfill);
	args[1] = Int32GetDatum(route->route_id);
	SPI_connect();
	found = dpwin_catalog_exec("SELECT 1 FROM dpwin.backfill b JOIN dpwin.route r USING (route_id)"
							   " WHERE b.backfill_id = $1 AND b.route_id = $2"
							   " AND b.state = 'running' AND b.lookback = r.lookback",
							   2, types, args, NULL, true);
	SPI_finish();
	if (found != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("backfill " INT64_FORMAT " is not running on route \"%s\" with its lookback",
						backfill, route->route_name),
				 errhint("CALL dpwin.backfill() runs the windows of a backfill; a route whose lookback changed starts a new one.")));

	dpwin_call_init(call, DPWIN_CALL_REFRESH);
	call->route_id = route->route_id;
	call->interval_end = interval_end;
	call->backfill_id = backfill;
	memcpy(&call->invocation_id,
		   DatumGetUUIDP(DirectFunctionCall1(gen_random_uuid, (Datum) 0)),
		   sizeof(pg_uuid_t));
	dpwin_run_coordinator(call);
	PG_RETURN_DATUM(dpwin_call_result(fcinfo, call));
}

/*
 * dpwin.verify(route, interval_end): the coordinator reads the window and
 * the target (verify.c) and journals the per-chunk results, which are
 * returned from the journal.
 */
Datum
dpwin_verify(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DpwinCallShared *call = palloc(sizeof(DpwinCallShared));
	DpwinRoute *route;
	TimestampTz interval_end;
	Datum		id;

	route = admit_window_call(fcinfo, &interval_end);
	dpwin_call_init(call, DPWIN_CALL_VERIFY);
	call->route_id = route->route_id;
	call->interval_end = interval_end;
	id = DirectFunctionCall1(gen_random_uuid, (Datum) 0);
	memcpy(&call->invocation_id, DatumGetUUIDP(id), sizeof(pg_uuid_t));
	dpwin_run_coordinator(call);

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	dpwin_verification_chunks(DatumGetUUIDP(id), rsinfo->setResult, rsinfo->setDesc);
	SPI_finish();
	return (Datum) 0;
}

static Datum
run_on_invocation(FunctionCallInfo fcinfo, DpwinCallMode mode, const char *action)
{
	DpwinCallShared *call = palloc(sizeof(DpwinCallShared));
	pg_uuid_t  *id;
	DpwinRoute *route;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("invocation must not be NULL")));
	id = PG_GETARG_UUID_P(0);
	route = invocation_route_for_owner(id, action, NULL);
	(void) dpwin_server_conf(route->server_name, GetUserId());

	dpwin_call_init(call, mode);
	call->invocation_id = *id;
	call->route_id = route->route_id;
	dpwin_run_coordinator(call);
	PG_RETURN_DATUM(dpwin_call_result(fcinfo, call));
}

Datum
dpwin_recover(PG_FUNCTION_ARGS)
{
	return run_on_invocation(fcinfo, DPWIN_CALL_RECOVER, "recover");
}

Datum
dpwin_abandon(PG_FUNCTION_ARGS)
{
	return run_on_invocation(fcinfo, DPWIN_CALL_ABANDON, "abandon");
}

/*
 * dpwin.reconcile(invocation): a read-only report of the publication intent
 * against the physical tables.
 */
Datum
dpwin_reconcile(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *id = PG_GETARG_UUID_P(0);
	DpwinInvocation *inv;
	DpwinRoute *route = invocation_route_for_owner(id, "reconcile", &inv);
	DpwinPublication *pub;
	ChClient   *client;
	StringInfoData buf;
	char	   *target_uuid;
	char	   *gen_uuid = NULL;
	char	   *backup_uuid = NULL;
	const char *verdict;
	DpwinOutcome outcome;
	MemoryContext cxt = CurrentMemoryContext;

	SPI_connect();
	pub = dpwin_publication_load(id);
	MemoryContextSwitchTo(cxt);
	if (pub)
	{
		DpwinPublication *copy = palloc(sizeof(DpwinPublication));

		copy->target_uuid_before = pstrdup(pub->target_uuid_before);
		copy->generation_table = pstrdup(pub->generation_table);
		copy->generation_uuid = pstrdup(pub->generation_uuid);
		copy->backup_table = pstrdup(pub->backup_table);
		copy->outcome = pub->outcome;
		pub = copy;
	}
	SPI_finish();

	client = dpwin_ch_client_open(dpwin_server_conf(route->server_name, GetUserId()),
								  psprintf("dpwin-%s-reconcile-", dpwin_uuid_text(id)));
	target_uuid = dpwin_target_table_uuid(client, route->target_database,
										  route->target_table);
	if (pub)
	{
		gen_uuid = dpwin_target_table_uuid(client, route->target_database,
										   pub->generation_table);
		backup_uuid = dpwin_target_table_uuid(client, route->target_database,
											  pub->backup_table);
		outcome = dpwin_publication_judge(pub, target_uuid, gen_uuid);

		/*
		 * A settled intent need not match the tables any more: a failed
		 * invocation dropped its generation, and a later refresh replaced the
		 * generation this one published.
		 */
		if (outcome == DPWIN_OUTCOME_UNKNOWN &&
			pub->outcome == DPWIN_OUTCOME_NOT_PUBLISHED &&
			target_uuid && strcmp(target_uuid, pub->target_uuid_before) == 0 &&
			gen_uuid == NULL)
			outcome = DPWIN_OUTCOME_NOT_PUBLISHED;
		if (outcome == DPWIN_OUTCOME_UNKNOWN &&
			pub->outcome == DPWIN_OUTCOME_PUBLISHED)
			verdict = "superseded";
		else
			verdict = dpwin_publication_outcome_name(outcome);
	}
	else
		verdict = "no_intent";
	dpwin_ch_client_close(client);

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"invocation_id\": \"%s\", \"state\": \"%s\", \"verdict\": \"%s\"",
					 dpwin_uuid_text(id), dpwin_registry_state_name(inv->state), verdict);
	appendStringInfoString(&buf, ", \"target\": ");
	escape_json(&buf, dpwin_ch_qualified_name(route->target_database, route->target_table));
	appendStringInfo(&buf, ", \"target_uuid_now\": %s",
					 target_uuid ? psprintf("\"%s\"", target_uuid) : "null");
	if (pub)
	{
		appendStringInfo(&buf, ", \"intent\": {\"target_uuid_before\": \"%s\", \"generation_uuid\": \"%s\", \"outcome\": %s}",
						 pub->target_uuid_before, pub->generation_uuid,
						 pub->outcome != DPWIN_OUTCOME_NONE ?
						 psprintf("\"%s\"", dpwin_publication_outcome_name(pub->outcome)) : "null");
		appendStringInfoString(&buf, ", \"generation_table\": ");
		escape_json(&buf, pub->generation_table);
		appendStringInfo(&buf, ", \"generation_table_uuid_now\": %s",
						 gen_uuid ? psprintf("\"%s\"", gen_uuid) : "null");
		appendStringInfoString(&buf, ", \"backup_table\": ");
		escape_json(&buf, pub->backup_table);
		appendStringInfo(&buf, ", \"backup_table_uuid_now\": %s",
						 backup_uuid ? psprintf("\"%s\"", backup_uuid) : "null");
	}
	appendStringInfoString(&buf, "}");
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

/*
 * dpwin.rollback(route, to_backup): admitted before any I/O, then run by a
 * coordinator.  The route must have published at least once (a publication
 * keeps the generation it replaced as a backup), and a named backup must
 * be one its publications kept; whether it still exists is for the
 * coordinator to find, under the lease.
 */
Datum
dpwin_rollback(PG_FUNCTION_ARGS)
{
	DpwinCallShared *call = palloc(sizeof(DpwinCallShared));
	DpwinRoute *route;
	char	   *backup = NULL;
	List	   *backups;
	int			nbackups;
	bool		known;
	ListCell   *lc;
	Datum		id;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("route must not be NULL")));
	route = dpwin_route_load(text_to_cstring(PG_GETARG_TEXT_PP(0)), false);
	dpwin_route_check_owner(route, "put a backup back into");
	dpwin_route_check_can_refresh(route);
	(void) dpwin_server_conf(route->server_name, GetUserId());
	if (!PG_ARGISNULL(1))
		backup = text_to_cstring(PG_GETARG_TEXT_PP(1));

	SPI_connect();
	backups = dpwin_publication_backups(route->route_id);
	nbackups = list_length(backups);
	known = false;
	foreach(lc, backups)
		known = known || (backup != NULL && strcmp((char *) lfirst(lc), backup) == 0);
	SPI_finish();

	if (nbackups == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("route \"%s\" has no backup to roll back to", route->route_name),
				 errdetail("A publication keeps the generation it replaces as a backup; this route has published none."),
				 errhint("Refresh the route instead: SELECT * FROM dpwin_refresh('%s', '<interval_end>');",
						 route->route_name)));
	if (backup != NULL && !known)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%s\" is not a backup of route \"%s\"", backup, route->route_name),
				 errdetail("The route's backups are the tables its publications kept, named %s<interval_end>_<invocation>.",
						   dpwin_backup_prefix(route->route_id)),
				 errhint("List them: SELECT backup_table FROM dpwin.invocations WHERE route_name = '%s' AND publication_outcome = 'published' ORDER BY created_at DESC;",
						 route->route_name)));

	dpwin_call_init(call, DPWIN_CALL_ROLLBACK);
	call->route_id = route->route_id;
	if (backup != NULL)
		strlcpy(call->to_backup, backup, sizeof(call->to_backup));
	id = DirectFunctionCall1(gen_random_uuid, (Datum) 0);
	memcpy(&call->invocation_id, DatumGetUUIDP(id), sizeof(pg_uuid_t));
	dpwin_run_coordinator(call);
	PG_RETURN_DATUM(dpwin_call_result(fcinfo, call));
}

static int
cmp_desc(const ListCell *a, const ListCell *b)
{
	return -strcmp((const char *) lfirst(a), (const char *) lfirst(b));
}

/*
 * dpwin.drop_backups(route, keep): drop all but the newest `keep` backups
 * of the route now, whatever its keep_backups (retention.c applies that
 * after each publication), and journal them as dropped.
 */
Datum
dpwin_drop_backups(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *route_name;
	int			keep;
	DpwinRoute *route;
	ChClient   *client;
	List	   *backups;
	List	   *ordered = NIL;
	List	   *published;
	ListCell   *lc;
	ListCell   *lc2;
	MemoryContext cxt = CurrentMemoryContext;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("route and keep must not be NULL")));
	route_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	keep = PG_GETARG_INT32(1);
	if (keep < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("keep must be zero or more, not %d", keep)));
	route = dpwin_route_load(route_name, false);
	dpwin_route_check_owner(route, "drop backups of");

	/* SETOF text is not a row type: take the executor's one-column desc */
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	client = dpwin_ch_client_open(dpwin_server_conf(route->server_name, GetUserId()),
								  psprintf("dpwin-route%d-drop-backups-", route->route_id));
	backups = dpwin_target_list_tables(client, route->target_database,
									   dpwin_backup_prefix(route->route_id));

	/*
	 * Newest first, in the order the journal published them: names embed
	 * interval_end, which says nothing about age when a window is refreshed
	 * twice or an older one after a newer one.  Backups the journal does not
	 * know come last, by name.
	 */
	list_sort(backups, cmp_desc);
	SPI_connect();
	published = dpwin_publication_backups(route->route_id);
	foreach(lc2, published)
	{
		char	   *name = lfirst(lc2);

		foreach(lc, backups)
		{
			if (strcmp(lfirst(lc), name) == 0)
			{
				MemoryContext old = MemoryContextSwitchTo(cxt);

				ordered = lappend(ordered, lfirst(lc));
				backups = foreach_delete_current(backups, lc);
				MemoryContextSwitchTo(old);
				break;
			}
		}
	}
	SPI_finish();
	backups = list_concat(ordered, backups);

	foreach(lc, backups)
	{
		Datum		value;
		bool		isnull = false;

		if (foreach_current_index(lc) < keep)
			continue;
		dpwin_target_drop_table(client, route->target_database, lfirst(lc));
		value = CStringGetTextDatum(lfirst(lc));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &isnull);
	}
	dpwin_ch_client_close(client);
	SPI_connect();
	dpwin_retention_mark_dropped(route->route_id,
								 list_copy_tail(backups, Min(keep, list_length(backups))));
	SPI_finish();
	PG_RETURN_VOID();
}

static void
target_locktag(LOCKTAG *tag, FunctionCallInfo fcinfo)
{
	char	   *server;
	char	   *database;
	char	   *table;
	int32		target_id;

	dpwin_check_sql_version();
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("server, database and table must not be NULL")));
	server = NameStr(*PG_GETARG_NAME(0));
	database = text_to_cstring(PG_GETARG_TEXT_PP(1));
	table = text_to_cstring(PG_GETARG_TEXT_PP(2));
	/* no route can have such a target: do not journal a lease row for it */
	if (database[0] == '\0' || table[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("target database and table must not be empty")));
	(void) dpwin_server_conf(server, GetUserId());
	/* the guard of a target is for those who may write to its server */
	if (object_aclcheck(ForeignServerRelationId, dpwin_server_check(server),
						GetUserId(), ACL_USAGE) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_FOREIGN_SERVER, server);

	SPI_connect();
	target_id = dpwin_lease_target_id(server, database, table);
	SPI_finish();
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) DPWIN_LOCK_CLASS,
						 (uint32) target_id, 2);
}

/*
 * dpwin.lock_target(server, database, table): take the target's guard for
 * this session, as dpwin's own runs do, so that other writers and DDL can
 * exclude themselves from a refresh (and a refresh from them).
 */
Datum
dpwin_lock_target(PG_FUNCTION_ARGS)
{
	LOCKTAG		tag;

	target_locktag(&tag, fcinfo);
	(void) LockAcquire(&tag, ExclusiveLock, true, false);
	PG_RETURN_BOOL(true);
}

Datum
dpwin_unlock_target(PG_FUNCTION_ARGS)
{
	LOCKTAG		tag;

	target_locktag(&tag, fcinfo);
	PG_RETURN_BOOL(LockRelease(&tag, ExclusiveLock, true));
}
