/*-------------------------------------------------------------------------
 *
 * finish.c
 *	  The steps after publication (steps.h; docs/design.md, "The state
 *	  machine"):
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

#include "lib/stringinfo.h"
#include "utils/json.h"
#include "utils/memutils.h"

#include "bgworker.h"
#include "build.h"
#include "chprobe.h"
#include "evidence.h"
#include "route_state.h"
#include "steps.h"
#include "window.h"

/* How the generation was built, as a jsonb object text, for evidence. */
static char *
generation_json(const DpwinGeneration *gen)
{
	StringInfoData buf;

	if (gen == NULL)
		return pstrdup("null");
	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"partitions\": %d, \"cloned_partitions\": %d"
					 ", \"dropped_partitions\": %d, \"cloned_parts\": " INT64_FORMAT
					 ", \"cloned_rows\": " INT64_FORMAT ", \"ranges\": %d"
					 ", \"deleted\": %s, \"attached_parts\": " INT64_FORMAT
					 ", \"digest_checks\": %d, \"merged_partitions\": %d"
					 ", \"minmax\": %s, \"counted_by_parts\": %s",
					 gen->partitions, gen->cloned_partitions, gen->dropped_partitions,
					 gen->cloned_parts, gen->cloned_rows, list_length(gen->ranges),
					 gen->deleted ? "true" : "false", gen->attached_parts,
					 gen->digest_checks, gen->merged_partitions,
					 gen->minmax_used ? "true" : "false",
					 gen->counted_by_parts ? "true" : "false");
	if (gen->deleted)
		appendStringInfo(&buf, ", \"rewritten\": %s", gen->rewritten ? "true" : "false");
	if (gen->minmax_why_not)
	{
		appendStringInfoString(&buf, ", \"why_not\": ");
		escape_json(&buf, gen->minmax_why_not);
	}
	if (gen->layout)
		appendStringInfo(&buf, ", \"layout\": \"%s\"", gen->layout);
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

static void
json_seconds(StringInfo buf, const char *key, double seconds)
{
	if (seconds < 0)
		appendStringInfo(buf, ", \"%s\": \"unavailable\"", key);
	else
		appendStringInfo(buf, ", \"%s\": %.6f", key, seconds);
}

/*
 * Window and chunk metrics: the window's facts as the build read them from
 * the generation it published (from the published target after a
 * recovery), the rest from the journal.
 */
static char *
evidence_metrics(Coordinator *c)
{
	StringInfoData buf;
	char	   *days;
	char	   *bounds;

	if (c->build.window_days != NULL)
	{
		days = c->build.window_days;
		bounds = c->build.window_bounds;
	}
	else
	{
		DpwinWindowFacts facts;

		dpwin_chprobe_window_facts(c->client, c->target, c->route->target_database,
								   c->route->target_table, c->route->window_column,
								   c->lo, c->hi, &facts);
		days = facts.days;
		bounds = facts.bounds;
	}

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{");
	dpwin_json_text(&buf, "invocation_id", dpwin_uuid_text(&c->id), false);
	dpwin_json_text(&buf, "window_lo", dpwin_timestamp_utc(c->lo), true);
	dpwin_json_text(&buf, "window_hi", dpwin_timestamp_utc(c->hi), true);
	appendStringInfo(&buf, ", \"chunks\": %d, \"skipped_chunks\": %d, \"cached_digests\": %d",
					 c->ext.nchunks, c->ext.skipped_chunks, c->cached_digests);
	appendStringInfo(&buf, ", \"source_rows\": " INT64_FORMAT ", \"staging_rows\": " INT64_FORMAT
					 ", \"target_rows\": " INT64_FORMAT ", \"kept_rows\": " INT64_FORMAT
					 ", \"encoded_bytes\": " INT64_FORMAT,
					 c->ext.source_rows, c->ext.staged_rows, c->build.final_rows, c->build.kept_rows,
					 c->ext.encoded_bytes);
	appendStringInfo(&buf, ", \"generation\": %s", generation_json(c->build.gen));
	dpwin_json_text(&buf, "source_digest", dpwin_digest_to_text(&c->ext.source_digest), true);
	appendStringInfo(&buf, ", \"utc_days\": %s", days);
	appendStringInfo(&buf, ", \"window_bounds\": %s", bounds);
	appendStringInfoString(&buf, ", \"chunk_metrics\": [");
	for (int i = 0; i < c->ext.nchunks; i++)
	{
		DpwinChunkSlot *s = &c->ext.slots[i];

		appendStringInfo(&buf, "%s{\"chunk_no\": %d, \"rows\": " UINT64_FORMAT ", \"bytes\": " UINT64_FORMAT
						 ", \"attempts\": %d, \"seconds\": %.6f, \"skipped\": %s}",
						 i ? ", " : "", s->chunk_no, s->rows, s->bytes, s->attempts, s->seconds,
						 s->result == DPWIN_CHUNK_SKIPPED ? "true" : "false");
	}
	appendStringInfoString(&buf, "]");
	appendStringInfoString(&buf, ", \"phases\": {");
	appendStringInfoString(&buf, "\"note\": \"stage_seconds covers overlapped source, encoding, HTTP, per-chunk verification and the cloning of the target\"");
	json_seconds(&buf, "stage_seconds", c->times.extract);
	json_seconds(&buf, "build_seconds", c->times.build);
	json_seconds(&buf, "verify_seconds", c->times.verify);
	json_seconds(&buf, "publish_seconds", c->times.publish);
	appendStringInfoString(&buf, "}");
	dpwin_json_text(&buf, "generation_table", c->build.generation, true);
	dpwin_json_text(&buf, "backup_table", c->build.backup, true);
	appendStringInfoString(&buf, "}");
	return buf.data;
}

/*
 * A rollback's evidence (docs/design.md, "Rolling back a generation"):
 * which generation is in place (the kept backup it put back, by its name
 * and UUID), which one it replaced and the backup name that one was kept
 * under, and the target's rows.  It read no source and digested no chunk,
 * so it records no window facts and no layout.
 */
static char *
rollback_metrics(Coordinator *c)
{
	const DpwinPublication *pub = c->build.pub;
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{");
	dpwin_json_text(&buf, "invocation_id", dpwin_uuid_text(&c->id), false);
	dpwin_json_text(&buf, "kind", dpwin_registry_kind_name(c->kind), true);
	dpwin_json_text(&buf, "restored_table", pub->generation_table, true);
	dpwin_json_text(&buf, "target_uuid", pub->generation_uuid, true);
	dpwin_json_text(&buf, "replaced_uuid", pub->target_uuid_before, true);
	dpwin_json_text(&buf, "backup_table", pub->backup_table, true);
	dpwin_json_text(&buf, "route_interval_end", dpwin_timestamp_utc(c->interval_end), true);
	appendStringInfo(&buf, ", \"target_rows\": " INT64_FORMAT, c->build.final_rows);
	json_seconds(&buf, "publish_seconds", c->times.publish);
	appendStringInfoString(&buf, "}");
	return buf.data;
}

/*
 * Rename the replaced table, which the generation's name holds after the
 * exchange, to the backup name, while it is still the table the intent
 * replaced (old, its UUID under that name, is NULL when not read yet).
 * The name's UUID says whether a RENAME has happened, so a failure that
 * may pass (a lost reply, a server restarting) is settled on the server
 * and the name read again, then the RENAME sent again, on the attempts'
 * backoff schedule (docs/design.md, "Failures"); anything else raises.
 */
static void
rename_to_backup(Coordinator *c, const DpwinPublication *pub, const char *old)
{
	const char *db = c->route->target_database;

	for (int attempt = 0;; attempt++)
	{
		ChHttpReply reply;
		ChHttpStatus status;
		char	   *query_id;

		if (old == NULL)
			old = dpwin_target_table_uuid(c->client, db, pub->generation_table);
		if (old == NULL || strcmp(old, pub->target_uuid_before) != 0)
			return;
		query_id = dpwin_ch_next_query_id(c->client, "backup");
		status = dpwin_target_rename(c->client, db, pub->generation_table,
									 pub->backup_table, query_id, &reply);
		if (status == CHHTTP_OK)
			return;
		if (attempt >= DPWIN_MAX_RETRIES || !dpwin_ch_status_transient(status, &reply))
			dpwin_ch_report(status, &reply, "keeping the replaced table as the backup");
		ereport(LOG,
				(errmsg("dpwin: invocation %s: the RENAME to the backup failed (%s), trying again in %ld ms",
						dpwin_uuid_text(&c->id), dpwin_chhttp_status_name(status),
						(long) dpwin_retry_backoff_ms << attempt)));
		if (dpwin_ch_status_outcome_unknown(status))
			dpwin_ch_settle_query(c->client, query_id);
		dpwin_sleep_ms((long) dpwin_retry_backoff_ms << attempt);
		old = NULL;
	}
}

/*
 * After a published exchange the old table carries the generation's name;
 * give it its backup name (idempotent: a recovering process may find it
 * done).  The intent is the one in memory, or the journal's.
 */
static void
keep_backup(Coordinator *c)
{
	DpwinPublication *pub = c->build.pub;
	char	   *old;

	if (pub == NULL)
	{
		dpwin_xact_begin("dpwin: reading the publication");
		MemoryContextSwitchTo(c->cxt);
		pub = dpwin_publication_load(&c->id);
		dpwin_xact_commit(c->cxt);
		if (pub == NULL)
			return;
	}
	/*
	 * The process that exchanged has just read it (one round trip less); a
	 * recovering one reads it now.
	 */
	old = c->build.replaced_uuid;
	rename_to_backup(c, pub, old);
	dpwin_build_name_generation(c, pub->generation_table);
	c->build.backup = MemoryContextStrdup(c->cxt, pub->backup_table);
}

/*
 * What a process that did not build the generation (recovery) does not
 * know: the published row count.
 */
static void
count_published(Coordinator *c)
{
	dpwin_build_set_final_rows(c, dpwin_chprobe_count(c->client,
													  c->route->target_database,
													  c->route->target_table));
	if (c->build.kept_rows == 0 && c->build.final_rows > c->ext.source_rows)
		dpwin_build_set_kept_rows(c, c->build.final_rows - c->ext.source_rows);
}

/* The publication's tables have their names, and its rows are counted. */
static void
recall_publication(Coordinator *c)
{
	if (c->build.backup == NULL)
		keep_backup(c);
	if (c->build.final_rows <= 0)
		count_published(c);
}

/* Commits with evidenced: the evidence, and the route's evidence function. */
static void
commit_evidence(Coordinator *c)
{
	dpwin_evidence_write(&c->id, c->route->route_id, c->target_id, c->epoch,
						 c->build.metrics, c->route->evidence_function);
}

DpwinStepResult
dpwin_step_published(Coordinator *c)
{
	recall_publication(c);
	c->build.metrics = c->kind == DPWIN_KIND_ROLLBACK ? rollback_metrics(c) :
		evidence_metrics(c);
	return dpwin_step_result(DPWIN_STATE_EVIDENCED, commit_evidence);
}

/* The result journaled with the completion (and copied to the caller). */
static void
record_result(Coordinator *c)
{
	StringInfoData details;
	char	   *metrics = dpwin_evidence_metrics(&c->id);

	initStringInfo(&details);
	appendStringInfoString(&details, "{");
	dpwin_json_text(&details, "window_lo", dpwin_timestamp_utc(c->lo), false);
	dpwin_json_text(&details, "window_hi", dpwin_timestamp_utc(c->hi), true);
	dpwin_json_text(&details, "interval_end", dpwin_timestamp_utc(c->interval_end), true);
	appendStringInfo(&details, ", \"evidence\": %s}", metrics ? metrics : "null");
	dpwin_registry_set_result(&c->id, details.data);

	/*
	 * The caller reads the whole result from the registry; the shared segment
	 * has a fixed size, and a cut-off copy would not be JSON.
	 */
	if ((Size) details.len < sizeof(c->call->details))
		strlcpy(c->call->details, details.data, sizeof(c->call->details));
	else
		snprintf(c->call->details, sizeof(c->call->details),
				 "{\"window_lo\": \"%s\", \"window_hi\": \"%s\", \"interval_end\": \"%s\", \"evidence\": null}",
				 dpwin_timestamp_utc(c->lo), dpwin_timestamp_utc(c->hi),
				 dpwin_timestamp_utc(c->interval_end));
}

/* Commits with completed: the route's state and the caller's result. */
static void
commit_completion(Coordinator *c)
{
	dpwin_route_state_advance(c->route->route_id, c->interval_end, &c->id,
							  c->target_id, c->epoch);
	record_result(c);
}

DpwinStepResult
dpwin_step_evidenced(Coordinator *c)
{
	recall_publication(c);
	return dpwin_step_result(DPWIN_STATE_COMPLETED, commit_completion);
}
