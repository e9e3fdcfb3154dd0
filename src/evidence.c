/*-------------------------------------------------------------------------
 *
 * evidence.c
 *	  Durable evidence of a publication (dpwin.evidence), written once and
 *	  fenced, with the route's evidence function in the same transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "catalog.h"
#include "evidence.h"
#include "lease.h"

bool
dpwin_evidence_write(const pg_uuid_t *id, int32 route_id, int32 target_id,
					 int64 epoch, const char *metrics_json,
					 Oid evidence_function)
{
	Oid			types[4] = {UUIDOID, INT4OID, INT8OID, TEXTOID};
	Datum		args[4];
	uint64		inserted;

	dpwin_lease_check_epoch(target_id, epoch);
	args[0] = UUIDPGetDatum(dpwin_uuid_copy(id));
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

/* The metrics of an invocation's evidence, as jsonb text; NULL when none. */
char *
dpwin_evidence_metrics(const pg_uuid_t *id)
{
	return dpwin_catalog_invocation_text("SELECT metrics::text FROM dpwin.evidence"
										 " WHERE invocation_id = $1", id, true);
}
