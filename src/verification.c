/*-------------------------------------------------------------------------
 *
 * verification.c
 *	  The verification journal (dpwin.verification): what each
 *	  dpwin.verify() found, chunk by chunk.  No lease: it fences nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "catalog.h"
#include "verification.h"

void
dpwin_verification_record(const DpwinVerification *v)
{
	Oid			types[11] = {
		UUIDOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID,
		TIMESTAMPTZOID, TEXTOID, UUIDOID, TEXTOID, INT4OID, OIDOID, TIMESTAMPTZOID
	};
	Datum		args[11];

	args[0] = UUIDPGetDatum(dpwin_uuid_copy(&v->id));
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

/* Columns of dpwin_verification_chunks()'s query: its result rows. */
#define Natts_verification_chunk	6

void
dpwin_verification_chunks(const pg_uuid_t *id, Tuplestorestate *tupstore,
						  TupleDesc desc)
{
	Oid			types[1] = {UUIDOID};
	Datum		args[1];
	uint64		n;

	args[0] = UUIDPGetDatum(dpwin_uuid_copy(id));
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
