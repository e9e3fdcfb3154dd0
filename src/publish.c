/*-------------------------------------------------------------------------
 *
 * publish.c
 *	  The coordinator's steps from the verified chunks to a published
 *	  generation (docs/design.md, "The state machine" and "Publication"):
 *
 *	  verified    build the generation (clone, remove the window, attach
 *				  the staged parts), verify it, persist the intent
 *				                                          -> publishing
 *	  publishing  read the UUIDs; if not yet published, check the target
 *	  (unknown)   is still the table that was cloned, EXCHANGE, read the
 *				  UUIDs again                             -> published
 *
 *	  A first run and a recovery take exactly these steps: recovery only
 *	  enters at the state the journal records, and may have to rebuild
 *	  what a dead process knew.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "admission.h"
#include "bgworker.h"
#include "coordinator.h"
#include "names.h"
#include "window.h"

/*
 * Target admission in a transaction of its own (type parity consults the
 * system caches), refusing a target that is not the table the invocation
 * was planned against.
 */
static DpwinTargetInfo *
readmit_target(Coordinator *c, const char *when)
{
	DpwinTargetInfo *now;
	char	   *qtarget = ch_qualified_name(c->route->target_database,
											c->route->target_table);

	StartTransactionCommand();
	MemoryContextSwitchTo(c->cxt);
	now = dpwin_target_admit(c->client, c->route);
	CommitTransactionCommand();
	MemoryContextSwitchTo(c->cxt);

	if (c->target != NULL && strcmp(now->uuid, c->target->uuid) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("target %s was replaced %s", qtarget, when),
				 errdetail("Its UUID was %s and is now %s.", c->target->uuid, now->uuid),
				 errhint("dpwin refuses to publish over a table it did not prepare; start a new invocation.")));
	if (c->schema_fingerprint != NULL &&
		strcmp(now->schema_fingerprint, c->schema_fingerprint) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the schema of target %s changed %s", qtarget, when),
				 errhint("dpwin refuses to publish a generation with a stale schema; start a new invocation.")));
	if (c->schema_fingerprint == NULL)
		c->schema_fingerprint = MemoryContextStrdup(c->cxt, now->schema_fingerprint);
	return now;
}

/* The whole window, as the one range a refresh replaces. */
List *
coordinator_window_ranges(Coordinator *c)
{
	DpwinChunkBounds *r = palloc(sizeof(DpwinChunkBounds));

	r->chunk_no = 0;
	r->lo = c->lo;
	r->hi = c->hi;
	return list_make1(r);
}

/* The staged chunks (all but the skipped ones), as contiguous ranges. */
List *
coordinator_staged_ranges(Coordinator *c)
{
	List	   *staged = NIL;

	for (int i = 0; i < c->nchunks; i++)
	{
		DpwinChunkBounds *b;

		if (c->slots[i].result != DPWIN_CHUNK_VERIFIED)
			continue;
		b = palloc(sizeof(DpwinChunkBounds));
		b->chunk_no = c->slots[i].chunk_no;
		b->lo = c->slots[i].lo;
		b->hi = c->slots[i].hi;
		staged = lappend(staged, b);
	}
	return dpwin_generation_merge_ranges(staged);
}

/*
 * Chunks that were skipped keep their rows from a clone of the target made
 * after they were compared (by a recovering process, or after the target's
 * parts changed): those rows must still be what the source had.
 */
void
coordinator_check_skipped_rows(Coordinator *c)
{
	DpwinDigest *now = palloc(sizeof(DpwinDigest) * c->nchunks);

	dpwin_target_chunk_digests(c->client, c->target, c->generation,
							   c->route->window_column, c->chunks, &c->key, now);
	for (int i = 0; i < c->nchunks; i++)
		if (c->slots[i].result == DPWIN_CHUNK_SKIPPED &&
			!dpwin_digest_equal(&now[i], &c->slots[i].digest))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("target %s changed inside skipped chunk %d since invocation %s compared it",
							ch_qualified_name(c->route->target_database, c->route->target_table),
							c->slots[i].chunk_no, dpwin_uuid_text(&c->id)),
					 errhint("Start a new invocation.")));
}

/*
 * Clone the target into a fresh generation and remove the window from the
 * clone.  A first run does it while the chunk workers read the source;
 * recovery, and a run whose generation went with a failed attempt, before
 * the staged parts are attached.
 */
void
coordinator_prepare_generation(Coordinator *c, List *ranges)
{
	TimestampTz started = GetCurrentTimestamp();
	MemoryContext oldcxt;

	/* during extraction the snapshot's transaction is current: stay out of it */
	oldcxt = MemoryContextSwitchTo(c->cxt);

	c->generation = MemoryContextStrdup(c->cxt,
										dpwin_generation_name(c->route->route_id, &c->id));
	dpwin_target_drop_table(c->client, c->route->target_database, c->generation);
	c->gen = dpwin_generation_clone(c->client, c->target, c->route->window_column,
									ranges, c->generation, &c->key);
	dpwin_generation_remove_ranges(c->client, c->target, c->gen);
	c->build_seconds = coordinator_seconds_since(started);
	MemoryContextSwitchTo(oldcxt);
}

DpwinState
step_build(Coordinator *c)
{
	DpwinPublication pub;
	List	   *staging = NIL;
	TimestampTz started;
	char	   *query_id;

	/* Under the lease: is the target still the one admission saw? */
	c->target = readmit_target(c, "while the generation was being built");
	if (c->gen == NULL)
	{
		coordinator_prepare_generation(c, coordinator_staged_ranges(c));
		if (c->skipped_chunks > 0)
			coordinator_check_skipped_rows(c);
	}

	started = GetCurrentTimestamp();
	for (int i = 0; i < c->nchunks; i++)
		if (c->slots[i].result == DPWIN_CHUNK_VERIFIED)
			staging = lappend(staging, c->slots[i].staging_table);
	c->final_rows = dpwin_generation_attach_staged(c->client, c->target, c->gen,
												   staging, c->staged_rows,
												   &c->staged_digest, &c->key);
	c->kept_rows = c->gen->target_kept_rows;

	/*
	 * Is the target still the table that was cloned?  Checked again right
	 * before the exchange (step_publish), this check lets a changed target
	 * fail the invocation before any intent exists.
	 */
	dpwin_generation_check_target(c->client, c->target, c->gen, &c->key,
								  "between generation build and publication");
	c->verify_seconds = coordinator_seconds_since(started);

	pub.target_uuid_before = c->target->uuid;
	pub.generation_table = c->generation;
	pub.generation_uuid = dpwin_target_table_uuid(c->client, c->route->target_database,
												  c->generation);
	if (pub.generation_uuid == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("generation %s vanished before publication", c->generation)));
	pub.backup_table = dpwin_backup_name(c->route->route_id, &c->id, c->interval_end);
	pub.outcome = DPWIN_OUTCOME_NONE;

	/* A cancellation that arrived during the build stops us here. */
	CHECK_FOR_INTERRUPTS();

	/* The intent, naming the statement, is durable before it can run. */
	query_id = ch_next_query_id(c->client, "exchange");
	dpwin_xact_begin("dpwin: publication intent");
	dpwin_publication_intent(&c->id, c->target_id, c->epoch, &pub, query_id);
	dpwin_registry_transition(&c->id, DPWIN_STATE_PUBLISHING, c->epoch, NULL, NULL);
	dpwin_xact_commit(c->cxt);
	c->state = DPWIN_STATE_PUBLISHING;
	return DPWIN_STATE_PUBLISHING;
}

void
coordinator_record_outcome(Coordinator *c, DpwinOutcome outcome)
{
	dpwin_xact_begin("dpwin: publication outcome");
	dpwin_publication_outcome(&c->id, c->target_id, c->epoch, outcome);
	dpwin_xact_commit(c->cxt);
}

/* The outcome of an exchange, read from the tables' UUIDs. */
static DpwinOutcome
reconcile(Coordinator *c, const DpwinPublication *pub,
		  char **target_uuid, char **generation_uuid)
{
	*target_uuid = dpwin_target_table_uuid(c->client, c->route->target_database,
										   c->route->target_table);
	*generation_uuid = dpwin_target_table_uuid(c->client, c->route->target_database,
											   pub->generation_table);
	return dpwin_publication_judge(pub, *target_uuid, *generation_uuid);
}

/*
 * After a published exchange the old generation carries the generation's
 * name; give it its backup name (idempotent).
 */
static void
keep_backup(Coordinator *c, const DpwinPublication *pub)
{
	char	   *old = dpwin_target_table_uuid(c->client, c->route->target_database,
											  pub->generation_table);

	if (old && strcmp(old, pub->target_uuid_before) == 0)
		dpwin_target_rename(c->client, c->route->target_database,
							pub->generation_table, pub->backup_table);
	c->backup = MemoryContextStrdup(c->cxt, pub->backup_table);
	c->generation = MemoryContextStrdup(c->cxt, pub->generation_table);
}

pg_noreturn static void report_unknown(Coordinator *c, const DpwinPublication *pub,
									   const char *target_uuid,
									   const char *generation_uuid);

static void
report_unknown(Coordinator *c, const DpwinPublication *pub,
			   const char *target_uuid, const char *generation_uuid)
{
	c->not_published = false;
	coordinator_record_outcome(c, DPWIN_OUTCOME_UNKNOWN);
	/* recovery of an unknown publication may find it unknown again */
	if (c->state != DPWIN_STATE_UNKNOWN)
		coordinator_transition(c, DPWIN_STATE_UNKNOWN, "publication outcome unknown",
							   unpack_sql_state(ERRCODE_TRANSACTION_RESOLUTION_UNKNOWN));
	ereport(ERROR,
			(errcode(ERRCODE_TRANSACTION_RESOLUTION_UNKNOWN),
			 errmsg("publication outcome of invocation %s is unknown", dpwin_uuid_text(&c->id)),
			 errdetail("Intent: target %s was %s, generation %s is %s. Found: target %s, %s %s.",
					   c->route->target_table, pub->target_uuid_before,
					   pub->generation_table, pub->generation_uuid,
					   target_uuid ? target_uuid : "missing",
					   pub->generation_table,
					   generation_uuid ? generation_uuid : "missing"),
			 errhint("Every table and journal row is kept. Compare with SELECT * FROM dpwin.reconcile('%s'), repair by hand, then run dpwin.recover().",
					 dpwin_uuid_text(&c->id))));
}

/*
 * Does the server list statements under the query_id the client sent?
 * Only then does ch_settle_query() finding nothing in system.processes
 * prove that a statement whose answer was lost has ended.  A proxy in
 * front of the server may run statements under ids of its own; there a
 * statement may still be queued or running, invisibly.  The probe looks
 * for itself.
 */
static bool
query_ids_visible(Coordinator *c)
{
	char	   *query_id = ch_next_query_id(c->client, "probe-query-id");
	char	   *answer;

	answer = ch_exec_id(c->client,
						psprintf("SELECT count() FROM system.processes WHERE query_id = %s"
								 " FORMAT TabSeparated", ch_quote_literal(query_id)),
						query_id);
	return strtol(answer, NULL, 10) == 1;
}

/*
 * The EXCHANGE got no answer and the UUIDs still show the target as it
 * was, but nothing proves that the statement has ended: exchanging again
 * now could be undone when it runs after all.  Stop in publishing, with
 * every table kept, for dpwin.recover() to settle once it has ended.
 */
pg_noreturn static void report_pending(Coordinator *c, const char *query_id,
									   ChHttpStatus status);

static void
report_pending(Coordinator *c, const char *query_id, ChHttpStatus status)
{
	c->not_published = false;
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("the EXCHANGE of invocation %s got no answer (%s) and may still run on ClickHouse",
					dpwin_uuid_text(&c->id), chhttp_status_name(status)),
			 errdetail("The target still has its old UUID, but the server cannot show whether statement %s has ended; exchanging again could be undone by it.",
					   query_id),
			 errhint("Once the statement has ended, SELECT * FROM dpwin.recover('%s') settles the invocation: it finishes the publication if the EXCHANGE ran, and retries it once if not.",
					 dpwin_uuid_text(&c->id))));
}

/*
 * One EXCHANGE, then the authoritative answer from the UUIDs.  A lost
 * reply is settled on the server first; PENDING when the reply was lost,
 * the UUIDs say not published, and the server cannot show that the
 * statement has ended.
 */
static DpwinOutcome
exchange(Coordinator *c, const DpwinPublication *pub, const char *query_id,
		 char **target_uuid, char **generation_uuid,
		 ChHttpStatus *status, ChHttpReply *reply)
{
	DpwinOutcome outcome;

	*status = dpwin_target_exchange(c->client, c->target, pub->generation_table,
									query_id, reply);
	if (*status != CHHTTP_OK && ch_status_outcome_unknown(*status))
		ch_settle_query(c->client, query_id);
	outcome = reconcile(c, pub, target_uuid, generation_uuid);
	if (outcome == DPWIN_OUTCOME_NOT_PUBLISHED && ch_status_outcome_unknown(*status) &&
		!query_ids_visible(c))
		outcome = DPWIN_OUTCOME_PENDING;
	return outcome;
}

/*
 * Not published yet: may this generation still replace the target?  Only
 * while the target is the table it was built from: same UUID, same
 * schema, same rows outside the window.  A refusal settles the invocation
 * as not published (the changed target is kept); a transient error leaves
 * it for another try.
 */
static void
check_still_ours(Coordinator *c, const DpwinPublication *pub,
				 const char *target_uuid, const char *generation_uuid)
{
	/* the generation of an earlier process: its build is not known here */
	if (c->gen == NULL)
	{
		c->gen = palloc0(sizeof(DpwinGeneration));
		c->gen->table = pub->generation_table;
		c->gen->window_column = c->route->window_column;
		c->gen->ranges = coordinator_window_ranges(c);
	}

	PG_TRY();
	{
		c->target = readmit_target(c, "between generation build and publication");
		if (strcmp(c->target->uuid, pub->target_uuid_before) == 0)
			dpwin_generation_check_target(c->client, c->target, c->gen, &c->key,
										  "between generation build and publication");
	}
	PG_CATCH();
	{
		MemoryContext ecxt = MemoryContextSwitchTo(c->cxt);
		ErrorData  *edata = CopyErrorData();

		MemoryContextSwitchTo(ecxt);
		/* the target no longer admits this generation */
		if (edata->sqlerrcode == ERRCODE_DATATYPE_MISMATCH ||
			edata->sqlerrcode == ERRCODE_FEATURE_NOT_SUPPORTED ||
			edata->sqlerrcode == ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE)
			c->not_published = true;
		FreeErrorData(edata);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (strcmp(c->target->uuid, pub->target_uuid_before) != 0)
		report_unknown(c, pub, target_uuid, generation_uuid);
}

DpwinState
step_publish(Coordinator *c)
{
	DpwinPublication *pub;
	DpwinOutcome outcome;
	char	   *target_uuid;
	char	   *generation_uuid;
	ChHttpStatus status = CHHTTP_OK;
	ChHttpReply reply;
	char	   *query_id = NULL;
	TimestampTz started = GetCurrentTimestamp();

	/* From here on, a cancellation waits until the outcome is settled. */
	HOLD_CANCEL_INTERRUPTS();

	dpwin_xact_begin("dpwin: reading the publication intent");
	MemoryContextSwitchTo(c->cxt);
	pub = dpwin_publication_load(&c->id);
	dpwin_xact_commit(c->cxt);
	if (pub == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("invocation %s is publishing without an intent",
						dpwin_uuid_text(&c->id))));

	/*
	 * Recovery reads the UUIDs first: an already published pair is
	 * recognised before any admission, so that a later legitimate schema
	 * change cannot hide it, and a pair not yet exchanged is checked again
	 * against the target.  A first run has just built and checked the
	 * generation (step_build) and sent no EXCHANGE yet.
	 */
	if (c->recovering)
	{
		/* The intent's EXCHANGE may still be on its way: settle it first. */
		if (pub->exchange_query_id != NULL)
			ch_settle_query(c->client, pub->exchange_query_id);
		outcome = reconcile(c, pub, &target_uuid, &generation_uuid);
	}
	else
	{
		outcome = DPWIN_OUTCOME_NOT_PUBLISHED;
		target_uuid = pub->target_uuid_before;
		generation_uuid = pub->generation_uuid;
	}
	if (outcome == DPWIN_OUTCOME_NOT_PUBLISHED)
	{
		int			tries = 0;

		if (c->recovering)
			check_still_ours(c, pub, target_uuid, generation_uuid);
		c->generation = MemoryContextStrdup(c->cxt, pub->generation_table);

		/*
		 * The exchange; after a lost reply whose statement is known to have
		 * ended without publishing, the one permitted retry.  Recovery's
		 * EXCHANGE is that retry already.
		 */
		do
		{
			query_id = tries == 0 && pub->exchange_query_id != NULL &&
				!c->recovering ? pub->exchange_query_id :
				ch_next_query_id(c->client, "exchange");
			outcome = exchange(c, pub, query_id, &target_uuid, &generation_uuid,
							   &status, &reply);
		} while (outcome == DPWIN_OUTCOME_NOT_PUBLISHED &&
				 ch_status_outcome_unknown(status) && !c->recovering &&
				 ++tries < 2);
	}

	switch (outcome)
	{
		case DPWIN_OUTCOME_PUBLISHED:
			coordinator_record_outcome(c, DPWIN_OUTCOME_PUBLISHED);
			coordinator_transition(c, DPWIN_STATE_PUBLISHED, NULL, NULL);
			c->publish_seconds = coordinator_seconds_since(started);
			keep_backup(c, pub);

			/*
			 * Published: cancellation stays held off until the process
			 * exits, so evidence and state follow the exchange without
			 * interruption.
			 */
			return DPWIN_STATE_PUBLISHED;
		case DPWIN_OUTCOME_PENDING:
			report_pending(c, query_id, status);
			break;
		case DPWIN_OUTCOME_NOT_PUBLISHED:

			/*
			 * The target is untouched: fail like any error before
			 * publication (coordinator_fail() journals the outcome).
			 */
			c->not_published = true;
			RESUME_CANCEL_INTERRUPTS();
			if (status != CHHTTP_OK)
				ch_report(status, &reply, c->recovering ? "retrying the exchange" :
						  "exchanging the target with its new generation");
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("EXCHANGE reported success but the target's UUID did not change")));
			break;
		case DPWIN_OUTCOME_UNKNOWN:
		case DPWIN_OUTCOME_NONE:
			report_unknown(c, pub, target_uuid, generation_uuid);
			break;
	}
	pg_unreachable();
}
