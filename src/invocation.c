/*-------------------------------------------------------------------------
 *
 * invocation.c
 *	  One invocation as its coordinator knows it (docs/design.md, "The
 *	  state machine"): loading its route, planning its window, registering
 *	  it or recalling it from the journal, and the one function that
 *	  changes its state.
 *
 *	  A step of the machine never writes the state: it returns the next
 *	  state and what must commit with it, and the machine hands both to
 *	  dpwin_invocation_transition(), which asserts the legal predecessor
 *	  (as the journal does again under its row lock), journals the change
 *	  in one transaction with that work, and only then sets c->state.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "miscadmin.h"
#include "utils/json.h"
#include "utils/memutils.h"

#include "bgworker.h"
#include "chunk.h"
#include "invocation.h"
#include "lease.h"
#include "names.h"
#include "window.h"

/* The only assignment of c->state. */
static void
invocation_set_state(Coordinator *c, DpwinState to)
{
	c->state = to;
}

void
dpwin_invocation_init(Coordinator *c, DpwinCallShared *call)
{
	memset(c, 0, sizeof(*c));
	c->call = call;
	c->id = call->invocation_id;
	c->cxt = AllocSetContextCreate(TopMemoryContext, "dpwin coordinator",
								   ALLOCSET_DEFAULT_SIZES);
	c->progress_slot = -1;
	c->times.extract = c->times.build = c->times.verify = c->times.publish = -1;
	invocation_set_state(c, DPWIN_STATE_PLANNED);
}

void
dpwin_json_text(StringInfo buf, const char *key, const char *value, bool comma)
{
	if (comma)
		appendStringInfoString(buf, ", ");
	escape_json(buf, key);
	appendStringInfoString(buf, ": ");
	if (value)
		escape_json(buf, value);
	else
		appendStringInfoString(buf, "null");
}

void
dpwin_invocation_transition(Coordinator *c, DpwinState to, DpwinCommitWith with,
							const char *message, int sqlerrcode)
{
	if (!dpwin_registry_state_may_follow(c->state, to))
		elog(ERROR, "dpwin: invocation %s cannot go from %s to %s",
			 dpwin_uuid_text(&c->id), dpwin_registry_state_name(c->state),
			 dpwin_registry_state_name(to));

	dpwin_xact_begin("dpwin: state change");
	if (with != NULL)
		with(c);
	dpwin_registry_transition(&c->id, to, c->epoch, message,
							  sqlerrcode ? unpack_sql_state(sqlerrcode) : NULL);
	dpwin_xact_commit(c->cxt);
	invocation_set_state(c, to);
}

void
dpwin_invocation_load(Coordinator *c, int32 route_id)
{
	dpwin_xact_begin("dpwin: loading the route");
	MemoryContextSwitchTo(c->cxt);
	c->route = dpwin_route_load_by_id(route_id);
	dpwin_route_check_can_refresh(c->route);
	c->conf = dpwin_server_conf(c->route->server_name, GetUserId());
	c->target_id = dpwin_lease_target_id(c->route->server_name,
										 c->route->target_database,
										 c->route->target_table);
	dpwin_xact_commit(c->cxt);
	c->client = dpwin_ch_client_open(c->conf, psprintf("dpwin-%s-", dpwin_uuid_text(&c->id)));
}

/*
 * The call's window, cut into chunks exactly as dpwin.plan() shows them,
 * and fresh digest keys: what a refresh and a verification start from.
 */
void
dpwin_invocation_plan_window(Coordinator *c)
{
	c->interval_end = c->call->interval_end;
	c->ext.chunks = dpwin_window_chunks(c->interval_end, c->route->lookback_us,
										c->route->chunk_us);
	c->lo = ((DpwinChunkBounds *) linitial(c->ext.chunks))->lo;
	c->hi = c->interval_end;
	dpwin_digest_key_generate(&c->ext.key);
}

/*
 * A rollback's plan (docs/design.md, "Rolling back a generation"): the
 * backup it puts back, and the route's last published window, which the
 * rollback leaves as the route's state.  It reads no window and has no
 * chunks.
 */
void
dpwin_invocation_plan_rollback(Coordinator *c, const char *backup,
							   TimestampTz interval_end)
{
	List	   *window = dpwin_window_chunks(interval_end, c->route->lookback_us,
											 c->route->chunk_us);

	c->kind = DPWIN_KIND_ROLLBACK;
	c->rollback_backup = MemoryContextStrdup(c->cxt, backup);
	c->interval_end = interval_end;
	c->lo = ((DpwinChunkBounds *) linitial(window))->lo;
	c->hi = interval_end;
	c->ext.chunks = NIL;
}

/*
 * A refresh that skips unchanged chunks starts from what the route's last
 * publication knew of the target: the digest of each chunk it published
 * or kept, valid while the target is the table it published, with the
 * same layout and schema (checked once admitted, in the extracting step).
 * The invocation takes over that publication's digest key, so that its
 * workers' digests compare with those (docs/design.md, "Skipping unchanged
 * chunks").  Before the plan is journaled: the plan names the key.
 */
void
dpwin_invocation_adopt_digest_cache(Coordinator *c)
{
	if (!c->route->skip_unchanged)
		return;
	dpwin_xact_begin("dpwin: reading the last publication");
	MemoryContextSwitchTo(c->cxt);
	c->digest_cache = dpwin_registry_digest_cache(c->route->route_id,
												  c->route->config_fingerprint);
	dpwin_xact_commit(c->cxt);
	if (c->digest_cache != NULL)
		c->ext.key = c->digest_cache->key;
}

/*
 * The coordinator's second connection, opened when first needed: the
 * statements that run on it while the first works (docs/design.md, "The
 * conversation with ClickHouse") are the staged parts' listing, the
 * window's facts with the generation's counts, and the clean-up's listing
 * and DROP.
 */
ChClient *
dpwin_invocation_second_client(Coordinator *c)
{
	if (c->second_client == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(c->cxt);

		c->second_client = dpwin_ch_client_open(c->conf,
												psprintf("dpwin-%s-2-", dpwin_uuid_text(&c->id)));
		MemoryContextSwitchTo(old);
	}
	return c->second_client;
}

/*
 * The clean-up, started early on the second connection: the invocation's
 * tables are listed before the EXCHANGE, while the intent commits and the
 * first connection exchanges.  Nothing creates a table of the invocation
 * after the generation is built.
 */
void
dpwin_invocation_list_own_tables_start(Coordinator *c)
{
	dpwin_target_list_tables_start(dpwin_invocation_second_client(c),
								   c->route->target_database,
								   dpwin_invocation_table_prefix(c->route->route_id, &c->id));
	c->second_pending = DPWIN_SECOND_LISTING;
}

/*
 * Once the generation is published, nothing reads the staging tables
 * again: every listed table but the generation (the replaced table under
 * its name, about to become the backup) is dropped on the second
 * connection while the first renames the backup.  When the listing
 * failed, the clean-up lists again.
 */
void
dpwin_invocation_drop_listed_start(Coordinator *c, const char *generation)
{
	List	   *tables;
	List	   *drop = NIL;
	ListCell   *lc;

	if (c->second_pending != DPWIN_SECOND_LISTING)
		return;
	c->second_pending = DPWIN_SECOND_NONE;
	if (!dpwin_target_list_tables_finish(c->second_client, &tables))
		return;
	foreach(lc, tables)
		if (strcmp((char *) lfirst(lc), generation) != 0)
			drop = lappend(drop, lfirst(lc));
	c->own_tables_listed = true;
	if (drop == NIL)
		return;
	dpwin_target_drop_tables_start(c->second_client, c->route->target_database, drop);
	c->second_pending = DPWIN_SECOND_DROPPING;
}

/*
 * Drop every table of this invocation but backups (best effort).  What the
 * second connection runs is waited for first; when it listed the tables
 * and dropped them, nothing is left, else they are listed and dropped
 * here.
 */
void
dpwin_invocation_drop_own_tables(Coordinator *c)
{
	List	   *tables;

	if (c->client == NULL || c->route == NULL)
		return;
	if (c->second_pending != DPWIN_SECOND_NONE)
	{
		ChHttpReply reply;
		bool		dropping = c->second_pending == DPWIN_SECOND_DROPPING;

		c->second_pending = DPWIN_SECOND_NONE;
		if (dpwin_ch_finish_status(c->second_client, &reply) != CHHTTP_OK || !dropping)
			c->own_tables_listed = false;
	}
	if (c->own_tables_listed)
		return;
	tables = dpwin_target_list_tables(c->client, c->route->target_database,
									  dpwin_invocation_table_prefix(c->route->route_id, &c->id));
	dpwin_target_drop_tables(c->client, c->route->target_database, tables);
}

/* The immutable plan, as jsonb text. */
static char *
plan_json(Coordinator *c)
{
	StringInfoData buf;
	ListCell   *lc;
	DpwinRoute *r = c->route;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{");
	dpwin_json_text(&buf, "route", r->route_name, false);
	appendStringInfo(&buf, ", \"route_id\": %d", r->route_id);
	dpwin_json_text(&buf, "interval_end", dpwin_timestamp_utc(c->interval_end), true);
	dpwin_json_text(&buf, "window_lo", dpwin_timestamp_utc(c->lo), true);
	dpwin_json_text(&buf, "window_hi", dpwin_timestamp_utc(c->hi), true);
	appendStringInfo(&buf, ", \"lookback_us\": " INT64_FORMAT ", \"chunk_us\": " INT64_FORMAT,
					 r->lookback_us, r->chunk_us);
	dpwin_json_text(&buf, "source", psprintf("%s.%s", r->source_schema, r->source_table), true);
	dpwin_json_text(&buf, "window_column", r->window_column, true);
	appendStringInfoString(&buf, ", \"columns\": [");
	for (int i = 0; i < r->ncolumns; i++)
	{
		if (i)
			appendStringInfoString(&buf, ", ");
		escape_json(&buf, r->columns[i]);
	}
	appendStringInfoString(&buf, "]");
	dpwin_json_text(&buf, "server", r->server_name, true);
	dpwin_json_text(&buf, "target_database", r->target_database, true);
	dpwin_json_text(&buf, "target_table", r->target_table, true);
	appendStringInfo(&buf, ", \"parallelism\": %d, \"batch_rows\": %d, \"max_encoded_bytes\": " INT64_FORMAT,
					 r->parallelism, r->batch_rows, r->max_encoded_bytes);
	dpwin_json_text(&buf, "config_fingerprint", r->config_fingerprint, true);
	dpwin_json_text(&buf, "digest_key", dpwin_digest_key_to_text(&c->ext.key), true);
	appendStringInfoString(&buf, ", \"chunks\": [");
	foreach(lc, c->ext.chunks)
	{
		DpwinChunkBounds *b = lfirst(lc);

		appendStringInfo(&buf, "%s{\"chunk_no\": %d, ", foreach_current_index(lc) ? ", " : "",
						 b->chunk_no);
		dpwin_json_text(&buf, "lo", dpwin_timestamp_utc(b->lo), false);
		dpwin_json_text(&buf, "hi", dpwin_timestamp_utc(b->hi), true);
		appendStringInfoString(&buf, "}");
	}
	appendStringInfoString(&buf, "]}");
	return buf.data;
}

/* A rollback's immutable plan, as jsonb text. */
static char *
rollback_plan_json(Coordinator *c)
{
	StringInfoData buf;
	DpwinRoute *r = c->route;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{");
	dpwin_json_text(&buf, "kind", dpwin_registry_kind_name(c->kind), false);
	dpwin_json_text(&buf, "route", r->route_name, true);
	appendStringInfo(&buf, ", \"route_id\": %d", r->route_id);
	dpwin_json_text(&buf, "interval_end", dpwin_timestamp_utc(c->interval_end), true);
	dpwin_json_text(&buf, "window_lo", dpwin_timestamp_utc(c->lo), true);
	dpwin_json_text(&buf, "window_hi", dpwin_timestamp_utc(c->hi), true);
	dpwin_json_text(&buf, "server", r->server_name, true);
	dpwin_json_text(&buf, "target_database", r->target_database, true);
	dpwin_json_text(&buf, "target_table", r->target_table, true);
	dpwin_json_text(&buf, "config_fingerprint", r->config_fingerprint, true);
	dpwin_json_text(&buf, "backup", c->rollback_backup, true);
	appendStringInfoString(&buf, "}");
	return buf.data;
}

/*
 * Persist the immutable plan in state planned (a rollback's in verified:
 * it has nothing to extract), under the lease: refuse
 * while an older invocation of the target has an unsettled publication,
 * and expire the orphans of dead coordinators in the same transaction.
 * Returns the expired orphans (DpwinOrphan), whose tables are the
 * caller's to drop.
 */
List *
dpwin_invocation_register(Coordinator *c)
{
	DpwinInvocation inv = {0};
	char	   *older;
	List	   *orphans;

	dpwin_xact_begin("dpwin: registering the invocation");
	older = dpwin_registry_unsettled_publication(c->target_id, &c->id);
	if (older)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("invocation %s of this target has an unsettled publication", older),
				 errdetail("A fresh invocation cannot bypass it."),
				 errhint("Settle it first: SELECT * FROM dpwin.recover('%s');", older)));
	MemoryContextSwitchTo(c->cxt);
	orphans = dpwin_registry_orphans(c->target_id, &c->id);
	dpwin_registry_expire_orphans(c->target_id, c->epoch, &c->id);
	MemoryContextSwitchTo(c->cxt);
	c->published_generation = dpwin_registry_published_generation(c->route->route_id,
																  c->target_id);
	inv.id = c->id;
	inv.route_id = c->route->route_id;
	inv.target_id = c->target_id;
	inv.interval_end = c->interval_end;
	inv.window_lo = c->lo;
	inv.window_hi = c->hi;
	inv.kind = c->kind;
	inv.state = c->kind == DPWIN_KIND_ROLLBACK ? DPWIN_STATE_VERIFIED : DPWIN_STATE_PLANNED;
	inv.plan = c->kind == DPWIN_KIND_ROLLBACK ? rollback_plan_json(c) : plan_json(c);
	inv.plan_fingerprint = dpwin_sha256_hex(inv.plan, strlen(inv.plan));
	inv.config_fingerprint = c->route->config_fingerprint;
	inv.lease_epoch = c->epoch;
	inv.caller_role = GetUserId();
	inv.backfill_id = c->call->backfill_id;
	dpwin_registry_create(&inv, c->ext.chunks);
	dpwin_xact_commit(c->cxt);
	c->registered = true;
	invocation_set_state(c, inv.state);
	return orphans;
}

/* Rebuild what a coordinator knew from the journal and the plan. */
DpwinInvocation *
dpwin_invocation_recall(Coordinator *c)
{
	DpwinInvocation *inv;
	char	   *key;
	DpwinExtraction *x = &c->ext;

	dpwin_xact_begin("dpwin: reading the journal");
	MemoryContextSwitchTo(c->cxt);
	inv = dpwin_registry_load(&c->id, false);
	c->interval_end = inv->interval_end;
	c->lo = inv->window_lo;
	c->hi = inv->window_hi;
	invocation_set_state(c, inv->state);
	c->kind = inv->kind;
	c->rollback_backup = inv->rollback_backup;
	c->schema_fingerprint = inv->schema_fingerprint;
	c->registered = true;
	key = dpwin_registry_digest_key(&c->id);
	if (key != NULL)
		(void) dpwin_digest_key_from_text(key, &x->key);

	/*
	 * The chunk journal, for metrics and for publishing staged chunks.  SPI
	 * leaves its own context current, which goes away at commit: what is
	 * recalled lives in the coordinator's.
	 */
	MemoryContextSwitchTo(c->cxt);
	x->slots = dpwin_chunk_load(&c->id, &x->nchunks);
	MemoryContextSwitchTo(c->cxt);
	for (int i = 0; i < x->nchunks; i++)
	{
		DpwinChunkBounds *bounds = palloc(sizeof(DpwinChunkBounds));

		bounds->chunk_no = x->slots[i].chunk_no;
		bounds->lo = x->slots[i].lo;
		bounds->hi = x->slots[i].hi;
		x->chunks = lappend(x->chunks, bounds);
	}
	dpwin_extraction_tally(x, &c->id, false);
	dpwin_xact_commit(c->cxt);
	return inv;
}

/*
 * Take what admission learned of the target.  The schema fingerprint is
 * the first admission's (or the journal's): a later admission is checked
 * against it, never replaces it.
 */
void
dpwin_invocation_set_target(Coordinator *c, DpwinTargetInfo *target)
{
	if (c->schema_fingerprint == NULL)
		c->schema_fingerprint = MemoryContextStrdup(c->cxt, target->schema_fingerprint);
	c->target = target;
}

/* One receipt slot per planned chunk, before any is read (skipping). */
void
dpwin_invocation_open_slots(Coordinator *c)
{
	c->ext.nchunks = list_length(c->ext.chunks);
	c->ext.slots = palloc0(sizeof(DpwinChunkSlot) * c->ext.nchunks);
}

/* What the chunk workers of this invocation need to know. */
static DpwinExtractJob
invocation_extract_job(Coordinator *c)
{
	DpwinExtractJob job;

	job.invocation_id = c->id;
	job.route = c->route;
	job.target = c->target;
	job.target_id = c->target_id;
	job.epoch = c->epoch;
	job.progress_slot = c->progress_slot;
	job.window_lo = c->lo;
	job.window_hi = c->hi;
	job.cxt = c->cxt;
	return job;
}

/*
 * Read the planned chunks with this invocation's workers
 * (dpwin_extraction_run()), which fill the receipts; the seconds it took.
 */
double
dpwin_invocation_extract(Coordinator *c, DpwinExtractMode mode,
						 void (*overlap) (void *arg), void *arg)
{
	DpwinExtractJob job = invocation_extract_job(c);

	return dpwin_extraction_run(&c->ext, &job, mode, overlap, arg);
}

/* Journal c->build.outcome: a DpwinCommitWith, or in a transaction. */
void
dpwin_invocation_record_outcome(Coordinator *c)
{
	dpwin_publication_outcome(&c->id, c->target_id, c->epoch, c->build.outcome);
}

/* The caller's result row. */
void
dpwin_invocation_fill_result(Coordinator *c)
{
	DpwinCallShared *call = c->call;

	strlcpy(call->state, dpwin_registry_state_name(c->state), sizeof(call->state));
	call->window_lo = c->lo;
	call->window_hi = c->hi;
	call->chunks = c->ext.nchunks ? c->ext.nchunks : list_length(c->ext.chunks);
	call->source_rows = c->ext.source_rows;
	call->staged_rows = c->ext.staged_rows;
	call->final_rows = c->build.final_rows;
	strlcpy(call->generation_table, c->build.generation ? c->build.generation : "",
			sizeof(call->generation_table));
	strlcpy(call->backup_table, c->build.backup ? c->build.backup : "",
			sizeof(call->backup_table));
}
