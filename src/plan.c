/*-------------------------------------------------------------------------
 *
 * plan.c
 *	  The SQL functions that show a window's chunks without running
 *	  anything: dpwin.plan(route, interval_end) and dpwin.plan_window().
 *	  No I/O.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "route.h"
#include "window.h"

/* Emit a chunk list as the (chunk_no, lo, hi) rows of a set-returning call. */
static void
emit_chunks(FunctionCallInfo fcinfo, List *chunks)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);

	foreach(lc, chunks)
	{
		DpwinChunkBounds *c = lfirst(lc);
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		values[0] = Int32GetDatum(c->chunk_no);
		values[1] = TimestampTzGetDatum(c->lo);
		values[2] = TimestampTzGetDatum(c->hi);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

static void
require_interval_end(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("interval_end must not be NULL"),
				 errdetail("dpwin has no wall-clock fallback: the window is always given by the caller."),
				 errhint("Pass the end of the data interval as a timestamptz, e.g. '2026-09-09T00:00:00Z'.")));
}

/*
 * dpwin.plan(route text, interval_end timestamptz)
 *		RETURNS TABLE(chunk_no int, lo timestamptz, hi timestamptz)
 *
 * The chunks a refresh of the route would read at interval_end.  No I/O.
 * Not STRICT, so that a NULL interval_end is an error and not an empty set.
 */
PG_FUNCTION_INFO_V1(dpwin_plan);

Datum
dpwin_plan(PG_FUNCTION_ARGS)
{
	DpwinRoute *route;
	char	   *name;
	Oid			relid;
	bool		missing = false;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("route name must not be NULL")));
	require_interval_end(fcinfo, 1);

	name = text_to_cstring(PG_GETARG_TEXT_PP(0));

	/*
	 * The plan shows the route's source: check SELECT on it before loading
	 * the route, which locks the table.
	 */
	relid = dpwin_route_source_relid(name);
	if (pg_class_aclcheck_ext(relid, GetUserId(), ACL_SELECT, &missing) != ACLCHECK_OK &&
		!missing &&
		pg_attribute_aclcheck_all(relid, GetUserId(), ACL_SELECT, ACLMASK_ANY) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to plan route \"%s\"", name),
				 errdetail("No SELECT privilege on its source table \"%s\".",
						   get_rel_name(relid))));

	route = dpwin_route_load(name, false);
	emit_chunks(fcinfo, dpwin_window_chunks(PG_GETARG_TIMESTAMPTZ(1),
											route->lookback_us,
											route->chunk_us));
	return (Datum) 0;
}

/*
 * dpwin.plan(route text, interval_end timestamp without time zone)
 *
 * Exists only to refuse: a timestamp without time zone would otherwise be
 * cast to timestamptz in the session's TimeZone, and the window would move
 * with the client's settings.  Same for a date.
 */
PG_FUNCTION_INFO_V1(dpwin_plan_naive);

Datum
dpwin_plan_naive(PG_FUNCTION_ARGS)
{
	Oid			argtype = get_fn_expr_argtype(fcinfo->flinfo, 1);

	ereport(ERROR,
			(errcode(ERRCODE_DATATYPE_MISMATCH),
			 errmsg("interval_end must be timestamp with time zone, not %s",
					argtype == DATEOID ? "date" : "timestamp without time zone"),
			 errdetail("A value without a time zone would be read in the session's TimeZone."),
			 errhint("Pass an aware value such as '2026-09-09T00:00:00Z' or cast with ::timestamptz.")));
	PG_RETURN_NULL();
}

/*
 * dpwin.plan_window(interval_end timestamptz, lookback interval,
 *					 chunk_interval interval)
 *
 * The same partition without a route.
 */
PG_FUNCTION_INFO_V1(dpwin_plan_window);

Datum
dpwin_plan_window(PG_FUNCTION_ARGS)
{
	int64		lookback_us;
	int64		chunk_us;

	require_interval_end(fcinfo, 0);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lookback must not be NULL")));
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("chunk_interval must not be NULL")));

	lookback_us = dpwin_duration_usecs(PG_GETARG_INTERVAL_P(1), "lookback");
	chunk_us = dpwin_duration_usecs(PG_GETARG_INTERVAL_P(2), "chunk_interval");
	if (chunk_us > lookback_us)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("chunk_interval \"%s\" is longer than lookback \"%s\"",
						dpwin_interval_text(PG_GETARG_INTERVAL_P(2)),
						dpwin_interval_text(PG_GETARG_INTERVAL_P(1)))));

	emit_chunks(fcinfo, dpwin_window_chunks(PG_GETARG_TIMESTAMPTZ(0),
											lookback_us, chunk_us));
	return (Datum) 0;
}
