/*-------------------------------------------------------------------------
 *
 * verify.c
 *	  The coordinator's side of dpwin.verify(): is the target's copy of a
 *	  window still what the source holds?  (docs/design.md,
 *	  "Verification".)
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

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "bgworker.h"
#include "invocation.h"
#include "verification.h"
#include "verify.h"
#include "window.h"

/* The per-chunk results as a jsonb array text; counts the drifting chunks. */
static char *
chunk_results(Coordinator *c, const DpwinDigest *target, int *drifting)
{
	StringInfoData buf;

	*drifting = 0;
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '[');
	for (int i = 0; i < c->ext.nchunks; i++)
	{
		DpwinChunkSlot *s = &c->ext.slots[i];
		bool		matches = dpwin_digest_equal(&s->digest, &target[i]);

		if (!matches)
			(*drifting)++;
		appendStringInfo(&buf, "%s{\"chunk_no\": %d", i ? ", " : "", s->chunk_no);
		dpwin_json_text(&buf, "lo", dpwin_timestamp_utc(s->lo), true);
		dpwin_json_text(&buf, "hi", dpwin_timestamp_utc(s->hi), true);
		appendStringInfo(&buf, ", \"source_rows\": " UINT64_FORMAT ", \"target_rows\": " UINT64_FORMAT
						 ", \"matches\": %s",
						 s->digest.count, target[i].count, matches ? "true" : "false");
		dpwin_json_text(&buf, "source_digest", dpwin_digest_to_text(&s->digest), true);
		dpwin_json_text(&buf, "target_digest", dpwin_digest_to_text(&target[i]), true);
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
	DpwinVerification v;

	v.id = c->id;
	v.route_id = c->route->route_id;
	v.interval_end = c->interval_end;
	v.window_lo = c->lo;
	v.window_hi = c->hi;
	v.snapshot_id = c->ext.snapshot_name;
	v.target_uuid = target_uuid;
	v.chunks_json = results;
	v.drifting_chunks = drifting;
	v.caller_role = GetUserId();
	v.started_at = started;
	dpwin_xact_begin("dpwin: recording a verification");
	dpwin_verification_record(&v);
	dpwin_xact_commit(c->cxt);
}

void
dpwin_verify_run(Coordinator *c)
{
	TimestampTz started = GetCurrentTimestamp();
	DpwinDigest *target;
	char	   *uuid_before;
	char	   *uuid_after;
	char	   *results;
	int			drifting;
	const char *db;
	const char *table;

	dpwin_invocation_load(c, c->call->route_id);
	db = c->route->target_database;
	table = c->route->target_table;
	dpwin_invocation_plan_window(c);

	/* Read-only admission: the target's columns and types, as a refresh. */
	dpwin_invocation_set_target(c, dpwin_extraction_admit(c->client, c->route,
														  c->cxt, NULL));

	/* The source: one snapshot, the route's parallelism, digests only. */
	(void) dpwin_invocation_extract(c, DPWIN_EXTRACT_DIGEST, NULL, NULL);

	/* The target: every chunk in one statement, of one table generation. */
	target = palloc(sizeof(DpwinDigest) * c->ext.nchunks);
	uuid_before = dpwin_target_table_uuid(c->client, db, table);
	dpwin_target_chunk_digests(c->client, c->target, table, c->route->window_column,
							   c->ext.chunks, &c->ext.key, target);
	uuid_after = dpwin_target_table_uuid(c->client, db, table);
	if (uuid_before == NULL || uuid_after == NULL ||
		strcmp(uuid_before, uuid_after) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("target %s was replaced while it was verified",
						dpwin_ch_qualified_name(db, table)),
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
	c->call->chunks = c->ext.nchunks;
	c->call->source_rows = c->ext.source_rows;
}
