/*-------------------------------------------------------------------------
 *
 * finish.c
 *	  The coordinator's steps after publication (docs/design.md, "The state
 *	  machine"), and the caller's result:
 *
 *	  published   durable evidence (idempotent, fenced)  -> evidenced
 *	  evidenced   advance the route's state by CAS        -> completed
 *
 *	  Both can fail after the data is visible; recovery with the same
 *	  invocation id re-enters here without a snapshot.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "utils/memutils.h"

#include "bgworker.h"
#include "catalog.h"
#include "coordinator.h"
#include "window.h"

static void
json_seconds(StringInfo buf, const char *key, double seconds)
{
	if (seconds < 0)
		appendStringInfo(buf, ", \"%s\": \"unavailable\"", key);
	else
		appendStringInfo(buf, ", \"%s\": %.6f", key, seconds);
}

/* UTC-day counts and window bounds of the published target. */
static void
target_window_facts(Coordinator *c, char **days, char **bounds)
{
	char	   *w = ch_quote_ident(c->route->window_column);
	char	   *tbl = ch_qualified_name(c->route->target_database, c->route->target_table);
	char	   *inwin = dpwin_target_window_predicate(c->target, c->route->window_column,
													  c->lo, c->hi);

	/*
	 * PREWHERE, not WHERE: choosing what to move to PREWHERE costs the
	 * server about a millisecond per part, 0.25 s on a 300-partition
	 * target (docs/benchmark.md).
	 */
	*days = ch_scalar(c->client,
					  psprintf("SELECT toJSONString(CAST((groupArray(d), groupArray(n)) AS Tuple(days Array(String), rows Array(UInt64))))"
							   " FROM (SELECT toString(toDate32(%s)) AS d, count() AS n FROM %s"
							   " PREWHERE %s GROUP BY d ORDER BY d)", w, tbl, inwin));
	*bounds = ch_scalar(c->client,
						psprintf("SELECT toJSONString(CAST((toString(minOrNull(w)), toString(maxOrNull(w)), countIf(NOT isNull(w)), countIf(isNull(w))) AS"
								 " Tuple(min Nullable(String), max Nullable(String), window_rows UInt64, null_window_rows UInt64)))"
								 " FROM (SELECT %s AS w FROM %s WHERE (%s) OR isNull(%s))",
								 w, tbl, inwin, w));
}

/* Window and chunk metrics, from the published target and the journal. */
static char *
coordinator_metrics(Coordinator *c)
{
	StringInfoData buf;
	char	   *days;
	char	   *bounds;

	target_window_facts(c, &days, &bounds);

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{");
	coordinator_json_text(&buf, "invocation_id", dpwin_uuid_text(&c->id), false);
	coordinator_json_text(&buf, "window_lo", dpwin_timestamp_utc(c->lo), true);
	coordinator_json_text(&buf, "window_hi", dpwin_timestamp_utc(c->hi), true);
	appendStringInfo(&buf, ", \"chunks\": %d, \"skipped_chunks\": %d", c->nchunks,
					 c->skipped_chunks);
	appendStringInfo(&buf, ", \"source_rows\": " INT64_FORMAT ", \"staging_rows\": " INT64_FORMAT
					 ", \"target_rows\": " INT64_FORMAT ", \"kept_rows\": " INT64_FORMAT
					 ", \"encoded_bytes\": " INT64_FORMAT,
					 c->source_rows, c->staged_rows, c->final_rows, c->kept_rows,
					 c->encoded_bytes);
	appendStringInfo(&buf, ", \"generation\": %s", dpwin_generation_json(c->gen));
	coordinator_json_text(&buf, "source_digest", dpwin_digest_to_text(&c->source_digest), true);
	appendStringInfo(&buf, ", \"utc_days\": %s", days);
	appendStringInfo(&buf, ", \"window_bounds\": %s", bounds);
	appendStringInfoString(&buf, ", \"chunk_metrics\": [");
	for (int i = 0; i < c->nchunks; i++)
	{
		DpwinChunkSlot *s = &c->slots[i];

		appendStringInfo(&buf, "%s{\"chunk_no\": %d, \"rows\": " UINT64_FORMAT ", \"bytes\": " UINT64_FORMAT
						 ", \"attempts\": %d, \"seconds\": %.6f, \"skipped\": %s}",
						 i ? ", " : "", s->chunk_no, s->rows, s->bytes, s->attempts, s->seconds,
						 s->result == DPWIN_CHUNK_SKIPPED ? "true" : "false");
	}
	appendStringInfoString(&buf, "]");
	appendStringInfoString(&buf, ", \"phases\": {");
	appendStringInfoString(&buf, "\"note\": \"stage_seconds covers overlapped source, encoding, HTTP, per-chunk verification and the cloning of the target\"");
	json_seconds(&buf, "stage_seconds", c->extract_seconds);
	json_seconds(&buf, "build_seconds", c->build_seconds);
	json_seconds(&buf, "verify_seconds", c->verify_seconds);
	json_seconds(&buf, "publish_seconds", c->publish_seconds);
	appendStringInfoString(&buf, "}");
	coordinator_json_text(&buf, "generation_table", c->generation, true);
	coordinator_json_text(&buf, "backup_table", c->backup, true);
	appendStringInfoString(&buf, "}");
	return buf.data;
}

/*
 * What a recovering process does not know from its own run: the tables of
 * the publication and the published row count.
 */
static void
recall_publication(Coordinator *c)
{
	DpwinPublication *pub;
	char	   *n;

	dpwin_xact_begin("dpwin: reading the publication");
	MemoryContextSwitchTo(c->cxt);
	pub = dpwin_publication_load(&c->id);
	dpwin_xact_commit(c->cxt);
	if (pub != NULL)
	{
		char	   *old = dpwin_target_table_uuid(c->client, c->route->target_database,
												  pub->generation_table);

		/* the old generation still carries the generation's name */
		if (old && strcmp(old, pub->target_uuid_before) == 0)
			dpwin_target_rename(c->client, c->route->target_database,
								pub->generation_table, pub->backup_table);
		c->generation = MemoryContextStrdup(c->cxt, pub->generation_table);
		c->backup = MemoryContextStrdup(c->cxt, pub->backup_table);
	}
	n = ch_scalar(c->client, psprintf("SELECT count() FROM %s",
									  ch_qualified_name(c->route->target_database,
														c->route->target_table)));
	c->final_rows = strtoll(n, NULL, 10);
	if (c->kept_rows == 0 && c->final_rows > c->source_rows)
		c->kept_rows = c->final_rows - c->source_rows;
}

DpwinState
step_evidence(Coordinator *c)
{
	char	   *metrics;

	/* a recovering process may not have built what it published */
	if (c->backup == NULL || c->final_rows <= 0)
		recall_publication(c);
	metrics = coordinator_metrics(c);
	dpwin_xact_begin("dpwin: evidence");
	dpwin_evidence_write(&c->id, c->route->route_id, c->target_id, c->epoch,
						 metrics, c->route->evidence_function);
	dpwin_registry_transition(&c->id, DPWIN_STATE_EVIDENCED, c->epoch, NULL, NULL);
	dpwin_xact_commit(c->cxt);
	c->state = DPWIN_STATE_EVIDENCED;
	return DPWIN_STATE_EVIDENCED;
}

/* The result journaled with the completion (and copied to the caller). */
static void
record_result(Coordinator *c)
{
	StringInfoData details;
	char	   *metrics = NULL;
	Oid			types[1] = {UUIDOID};
	Datum		args[1] = {UUIDPGetDatum(&c->id)};

	if (dpwin_catalog_exec("SELECT metrics::text FROM dpwin.evidence WHERE invocation_id = $1",
						   1, types, args, NULL, true) == 1)
		metrics = MemoryContextStrdup(c->cxt, dpwin_catalog_text(0, 1));
	initStringInfo(&details);
	appendStringInfoString(&details, "{");
	coordinator_json_text(&details, "window_lo", dpwin_timestamp_utc(c->lo), false);
	coordinator_json_text(&details, "window_hi", dpwin_timestamp_utc(c->hi), true);
	coordinator_json_text(&details, "interval_end", dpwin_timestamp_utc(c->interval_end), true);
	appendStringInfo(&details, ", \"evidence\": %s}", metrics ? metrics : "null");
	dpwin_registry_set_result(&c->id, details.data);

	/*
	 * The caller reads the whole result from the registry; the shared
	 * segment has a fixed size, and a cut-off copy would not be JSON.
	 */
	if ((Size) details.len < sizeof(c->call->details))
		strlcpy(c->call->details, details.data, sizeof(c->call->details));
	else
		snprintf(c->call->details, sizeof(c->call->details),
				 "{\"window_lo\": \"%s\", \"window_hi\": \"%s\", \"interval_end\": \"%s\", \"evidence\": null}",
				 dpwin_timestamp_utc(c->lo), dpwin_timestamp_utc(c->hi),
				 dpwin_timestamp_utc(c->interval_end));
}

DpwinState
step_advance(Coordinator *c)
{
	if (c->backup == NULL || c->final_rows <= 0)
		recall_publication(c);
	dpwin_xact_begin("dpwin: route state");
	dpwin_route_state_advance(c->route->route_id, c->interval_end, &c->id,
							  c->target_id, c->epoch);
	dpwin_registry_transition(&c->id, DPWIN_STATE_COMPLETED, c->epoch, NULL, NULL);
	record_result(c);
	dpwin_xact_commit(c->cxt);
	c->state = DPWIN_STATE_COMPLETED;
	return DPWIN_STATE_COMPLETED;
}

void
coordinator_fill_result(Coordinator *c)
{
	DpwinCallShared *call = c->call;

	strlcpy(call->state, dpwin_state_name(c->state), sizeof(call->state));
	call->window_lo = c->lo;
	call->window_hi = c->hi;
	call->chunks = c->nchunks ? c->nchunks : list_length(c->chunks);
	call->source_rows = c->source_rows;
	call->staged_rows = c->staged_rows;
	call->final_rows = c->final_rows;
	strlcpy(call->generation_table, c->generation ? c->generation : "",
			sizeof(call->generation_table));
	strlcpy(call->backup_table, c->backup ? c->backup : "",
			sizeof(call->backup_table));
}
