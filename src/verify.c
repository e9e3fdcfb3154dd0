/*-------------------------------------------------------------------------
 *
 * verify.c
 *	  The coordinator's side of dpwin.verify(): is the target's copy of a
 *	  window still what the source holds?  (docs/guide.md, "Verifying a
 *	  window"; docs/design.md, "Verification".)
 *
 *	  The window is planned exactly as a refresh plans it and read under
 *	  one exported snapshot by the same chunk workers and encoders, which
 *	  only digest (DPWIN_EXTRACT_DIGEST).  ClickHouse digests the target's
 *	  rows of every chunk in one statement, so all of them come from one
 *	  table generation, whose UUID is read before and after it.  Nothing is
 *	  written to ClickHouse and no lease is taken: a verification never
 *	  blocks a refresh, and a refresh exchanging the table meanwhile makes
 *	  it fail, not lie.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "bgworker.h"
#include "catalog.h"
#include "coordinator.h"
#include "window.h"

/* The per-chunk results as a jsonb array text; counts the drifting chunks. */
static char *
chunk_results(Coordinator *c, const DpwinDigest *target, int *drifting)
{
	StringInfoData buf;

	*drifting = 0;
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '[');
	for (int i = 0; i < c->nchunks; i++)
	{
		DpwinChunkSlot *s = &c->slots[i];
		bool		matches = dpwin_digest_equal(&s->digest, &target[i]);

		if (!matches)
			(*drifting)++;
		appendStringInfo(&buf, "%s{\"chunk_no\": %d", i ? ", " : "", s->chunk_no);
		coordinator_json_text(&buf, "lo", dpwin_timestamp_utc(s->lo), true);
		coordinator_json_text(&buf, "hi", dpwin_timestamp_utc(s->hi), true);
		appendStringInfo(&buf, ", \"source_rows\": " UINT64_FORMAT ", \"target_rows\": " UINT64_FORMAT
						 ", \"matches\": %s",
						 s->digest.count, target[i].count, matches ? "true" : "false");
		coordinator_json_text(&buf, "source_digest", dpwin_digest_to_text(&s->digest), true);
		coordinator_json_text(&buf, "target_digest", dpwin_digest_to_text(&target[i]), true);
		appendStringInfoChar(&buf, '}');
	}
	appendStringInfoChar(&buf, ']');
	return buf.data;
}

/* Journal the verification (no lease: it changes nothing it fences). */
static void
record_verification(Coordinator *c, const char *target_uuid, const char *results,
					int drifting, TimestampTz started)
{
	Oid			types[11] = {UUIDOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID,
		TIMESTAMPTZOID, TEXTOID, UUIDOID, TEXTOID, INT4OID, OIDOID, TIMESTAMPTZOID};
	Datum		args[11];

	args[0] = UUIDPGetDatum(&c->id);
	args[1] = Int32GetDatum(c->route->route_id);
	args[2] = TimestampTzGetDatum(c->interval_end);
	args[3] = TimestampTzGetDatum(c->lo);
	args[4] = TimestampTzGetDatum(c->hi);
	args[5] = CStringGetTextDatum(c->snapshot_name);
	args[6] = DirectFunctionCall1(uuid_in, CStringGetDatum(target_uuid));
	args[7] = CStringGetTextDatum(results);
	args[8] = Int32GetDatum(drifting);
	args[9] = ObjectIdGetDatum(GetUserId());
	args[10] = TimestampTzGetDatum(started);
	dpwin_xact_begin("dpwin: recording a verification");
	dpwin_catalog_exec("INSERT INTO dpwin.verification (verification_id, route_id,"
					   " interval_end, window_lo, window_hi, snapshot_id, target_uuid,"
					   " chunks, drifting_chunks, caller_role, started_at)"
					   " VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11)",
					   11, types, args, NULL, false);
	dpwin_xact_commit(c->cxt);
}

void
coordinator_verify(Coordinator *c)
{
	TimestampTz started = GetCurrentTimestamp();
	DpwinDigest *target;
	char	   *uuid_before;
	char	   *uuid_after;
	char	   *results;
	int			drifting;
	const char *db;
	const char *table;

	coordinator_load(c, c->call->route_id);
	db = c->route->target_database;
	table = c->route->target_table;
	coordinator_plan_window(c);

	/* Read-only admission: the target's columns and types, as a refresh. */
	c->target = coordinator_admit_target(c);

	/* The source: one snapshot, the route's parallelism, digests only. */
	coordinator_extract_chunks(c, DPWIN_EXTRACT_DIGEST, NULL);

	/* The target: every chunk in one statement, of one table generation. */
	target = palloc(sizeof(DpwinDigest) * c->nchunks);
	uuid_before = dpwin_target_table_uuid(c->client, db, table);
	dpwin_target_chunk_digests(c->client, c->target, table, c->route->window_column,
							   c->chunks, &c->key, target);
	uuid_after = dpwin_target_table_uuid(c->client, db, table);
	if (uuid_before == NULL || uuid_after == NULL ||
		strcmp(uuid_before, uuid_after) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("target %s was replaced while it was verified",
						ch_qualified_name(db, table)),
				 errdetail("Its UUID was %s before the digests and %s after them.",
						   uuid_before ? uuid_before : "missing",
						   uuid_after ? uuid_after : "missing"),
				 errhint("A refresh published meanwhile; run dpwin.verify() again.")));

	results = chunk_results(c, target, &drifting);
	record_verification(c, uuid_before, results, drifting, started);

	strlcpy(c->call->state, drifting == 0 ? "matches" : "drifts",
			sizeof(c->call->state));
	c->call->window_lo = c->lo;
	c->call->window_hi = c->hi;
	c->call->chunks = c->nchunks;
	c->call->source_rows = c->source_rows;
}
