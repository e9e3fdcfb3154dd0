/*-------------------------------------------------------------------------
 *
 * publish.c
 *	  The steps from the verified chunks to a published generation
 *	  (steps.h; docs/design.md, "The state machine" and "Publication"):
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
#include "build.h"
#include "chprobe.h"
#include "exchange_probe.h"
#include "facts.h"
#include "names.h"
#include "steps.h"
#include "target.h"
#include "window.h"

/* Commits with publishing: the intent, naming its EXCHANGE. */
static void
commit_intent(Coordinator *c)
{
	dpwin_publication_intent(&c->id, c->target_id, c->epoch, c->build.pub,
							 c->build.exchange_query_id);
}

/*
 * Under the lease: is the target still the one admission saw (same UUID,
 * same schema, still admitted)?  NULL when it is, and then c->target is
 * what admission saw now; else the refusal, as a value, so that the caller
 * decides what it means.  Failures that are no verdict (a lost
 * connection) ereport.
 */
static DpwinRefusal *
readmit_target(Coordinator *c, const char *when)
{
	DpwinTargetInfo *now;
	DpwinRefusal *refusal;

	now = dpwin_extraction_admit(c->client, c->route, c->cxt, &refusal);
	if (refusal == NULL)
		refusal = dpwin_admission_check_unchanged(now,
												  c->target ? c->target->uuid : NULL,
												  c->schema_fingerprint, when);
	if (refusal != NULL)
		return refusal;
	dpwin_invocation_set_target(c, now);
	return NULL;
}

/*
 * The window's facts for the evidence (docs/design.md, "The conversation
 * with ClickHouse"), read from the generation on the second connection
 * while the build's checks run on the first: once the staged parts are
 * attached, the generation holds every row the exchange publishes, and
 * the checks that follow change nothing in it.
 */
static void
start_window_facts(void *arg)
{
	Coordinator *c = (Coordinator *) arg;

	dpwin_chprobe_window_facts_start(dpwin_invocation_second_client(c), c->target,
									 c->route->target_database, c->build.generation,
									 c->route->window_column, c->lo, c->hi,
									 dpwin_generation_ranges_sql(c->build.gen));
}

/*
 * The counts of the built generation, read on the window column inside
 * the window and from the parts for the whole table: the rows inside the
 * ranges are the staged rows, and the rest are the target's kept rows.
 * Returns the generation's rows; ERRCODE_DATA_EXCEPTION when they differ.
 */
static int64
check_counts(const DpwinGeneration *gen, int64 staged_rows, int64 ranges_rows,
			 int64 rows)
{
	if (ranges_rows != staged_rows || rows - ranges_rows != gen->target_kept_rows)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("generation %s does not verify", gen->table),
				 errdetail("It holds " INT64_FORMAT " rows inside the window and " INT64_FORMAT
						   " outside; expected " INT64_FORMAT " staged and " INT64_FORMAT
						   " kept from the target.",
						   ranges_rows, rows - ranges_rows, staged_rows, gen->target_kept_rows),
				 errhint("The target may have been written to while the generation was built; hold dpwin.lock_target() in other writers of the target.")));
	return rows;
}

/* Check the generation's counts, and keep the window's facts. */
static void
take_window_facts(Coordinator *c, const DpwinWindowFacts *facts)
{
	dpwin_build_set_final_rows(c, check_counts(c->build.gen, c->ext.staged_rows,
											   facts->ranges_rows, facts->rows));
	c->build.window_days = MemoryContextStrdup(c->cxt, facts->days);
	c->build.window_bounds = MemoryContextStrdup(c->cxt, facts->bounds);
}

/* The facts, and the generation's counts read with them. */
static void
finish_window_facts(Coordinator *c)
{
	DpwinWindowFacts facts;

	dpwin_chprobe_window_facts_finish(c->second_client, &facts);
	take_window_facts(c, &facts);
}

/*
 * The window's facts without reading the generation (docs/design.md,
 * "Building the generation"): where its parts are exactly those it had
 * before the attach and the staged ones, its rows are the kept rows
 * counted then and the staged rows, and its window holds the rows each
 * chunk's digest described, or, for a chunk kept from the target, the
 * target's rows of it.  False when they cannot be taken so: a merge, or a
 * chunk whose facts are not known.
 */
static bool
window_facts_from_chunks(Coordinator *c)
{
	DpwinWindowFacts facts;

	if (!dpwin_generation_parts_add_up(c->build.gen, &facts.rows) ||
		!dpwin_facts_from_chunks(c->ext.slots, c->ext.nchunks, c->ext.kept_facts,
								 c->build.gen->baseline_null_rows, &facts))
		return false;
	take_window_facts(c, &facts);
	return true;
}

DpwinStepResult
dpwin_step_verified(Coordinator *c)
{
	DpwinPublication *pub;
	DpwinStaged staged = {0};
	TimestampTz started;
	DpwinRefusal *refusal;
	bool		from_chunks;

	for (int i = 0; i < c->ext.nchunks; i++)
		if (c->ext.slots[i].result == DPWIN_CHUNK_VERIFIED)
			staged.tables = lappend(staged.tables, c->ext.slots[i].staging_table);
	staged.rows = c->ext.staged_rows;
	staged.digest = &c->ext.staged_digest;

	/*
	 * The staged parts are listed on the second connection while the target
	 * is admitted again on the first: the staging tables are the
	 * invocation's own, and admission's answer does not change them.
	 */
	if (staged.tables != NIL)
	{
		staged.parts_from = dpwin_invocation_second_client(c);
		dpwin_generation_staged_parts_start(staged.parts_from,
											c->route->target_database, staged.tables);
	}
	refusal = readmit_target(c, "while the generation was being built");
	if (refusal != NULL)
		dpwin_admission_raise(refusal);

	/*
	 * Every staging table is the target as admitted (and admitted again
	 * just now, also after a recovery, which knows it only from here on),
	 * in one read before any of their parts is attached.
	 */
	dpwin_target_check_copies(c->client, c->target, staged.tables);
	if (c->build.gen == NULL)
	{
		/* the second connection lists the staged parts meanwhile */
		dpwin_build_prepare_generation_alone(c, dpwin_build_staged_ranges(c));
		if (c->ext.skipped_chunks > 0)
			dpwin_build_check_skipped_rows(c);
	}

	/*
	 * A generation whose contents before the attach are known needs no read
	 * of its window after it, unless its parts then say otherwise.  Its
	 * baseline is known only where every chunk's facts are: staged, or kept
	 * from the target (dpwin_step_extracting).
	 */
	started = GetCurrentTimestamp();
	from_chunks = c->build.gen->baseline_known;
	dpwin_generation_attach_staged(c->client, c->target, c->build.gen, &staged,
								   &c->ext.key, from_chunks ? NULL : start_window_facts, c);
	dpwin_build_set_kept_rows(c, c->build.gen->target_kept_rows);

	/*
	 * Is the target still the table that was cloned?  Checked again right
	 * before the exchange (dpwin_step_publishing), this check lets a changed
	 * target fail the invocation before any intent exists.
	 */
	refusal = dpwin_generation_check_target(c->client, c->target, c->build.gen,
											&c->ext.key,
											"between generation build and publication");
	if (refusal != NULL)
		dpwin_admission_raise(refusal);

	/* The generation's counts, with the window's facts. */
	if (!from_chunks || !window_facts_from_chunks(c))
	{
		if (from_chunks)
			start_window_facts(c);
		finish_window_facts(c);
	}
	c->times.verify = dpwin_seconds_since(started);

	pub = MemoryContextAllocZero(c->cxt, sizeof(DpwinPublication));
	pub->target_uuid_before = c->target->uuid;
	pub->generation_table = c->build.generation;
	/* read when the generation was created, which checked that it exists */
	pub->generation_uuid = c->build.gen->uuid;
	Assert(pub->generation_uuid != NULL && pub->generation_uuid[0] != '\0');
	dpwin_invocation_list_own_tables_start(c);
	pub->backup_table = dpwin_backup_name(c->route->route_id, &c->id, c->interval_end);
	return dpwin_step_intent(c, pub);
}

/*
 * The end of a refresh's build, and of a rollback's check of its backup:
 * the intent (target UUID before, the generation and its UUID, the name
 * the replaced table takes), which commits with publishing, naming the
 * EXCHANGE that follows.
 */
DpwinStepResult
dpwin_step_intent(Coordinator *c, DpwinPublication *pub)
{
	pub->outcome = DPWIN_OUTCOME_NONE;
	c->build.pub = pub;

	/* A cancellation that arrived during the build stops us here. */
	CHECK_FOR_INTERRUPTS();

	/* The intent, naming the statement, is durable before it can run. */
	c->build.exchange_query_id = MemoryContextStrdup(c->cxt,
													 dpwin_ch_next_query_id(c->client, "exchange"));
	return dpwin_step_result(DPWIN_STATE_PUBLISHING, commit_intent);
}

/* The outcome of an exchange, read from the tables' UUIDs. */
static DpwinOutcome
reconcile(Coordinator *c, const DpwinPublication *pub,
		  char **target_uuid, char **generation_uuid)
{
	dpwin_target_table_uuids(c->client, c->route->target_database,
							 c->route->target_table, pub->generation_table,
							 target_uuid, generation_uuid);
	return dpwin_publication_judge(pub, *target_uuid, *generation_uuid);
}

/*
 * The UUIDs show neither the target as it was nor the generation in its
 * place.  The machine journals the outcome and the state unknown
 * (coordinator.c) before the caller sees this error.
 */
pg_noreturn static void report_unknown(Coordinator *c, const DpwinPublication *pub,
									   const char *target_uuid,
									   const char *generation_uuid);

static void
report_unknown(Coordinator *c, const DpwinPublication *pub,
			   const char *target_uuid, const char *generation_uuid)
{
	c->build.outcome = DPWIN_OUTCOME_UNKNOWN;
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
	c->build.outcome = DPWIN_OUTCOME_PENDING;
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("the EXCHANGE of invocation %s got no answer (%s) and may still run on ClickHouse",
					dpwin_uuid_text(&c->id), dpwin_chhttp_status_name(status)),
			 errdetail("The target still has its old UUID, but the server cannot show whether statement %s has ended; exchanging again could be undone by it.",
					   query_id),
			 errhint("Once the statement has ended, SELECT * FROM dpwin.recover('%s') settles the invocation: it finishes the publication if the EXCHANGE ran, and retries it once if not.",
					 dpwin_uuid_text(&c->id))));
}

/*
 * One EXCHANGE, then the authoritative answer from the UUIDs.  A lost
 * reply is settled on the server first; PENDING when the reply was lost,
 * the UUIDs say not published, and the server cannot show that the
 * statement has ended (only when the server shows a client's query_id
 * does dpwin_ch_settle_query() finding nothing prove that it has).
 */
static DpwinOutcome
exchange(Coordinator *c, const DpwinPublication *pub, const char *query_id,
		 char **target_uuid, char **generation_uuid,
		 ChHttpStatus *status, ChHttpReply *reply)
{
	DpwinOutcome outcome;

	*status = dpwin_target_exchange(c->client, c->target, pub->generation_table,
									query_id, reply);
	if (*status != CHHTTP_OK && dpwin_ch_status_outcome_unknown(*status))
		dpwin_ch_settle_query(c->client, query_id);
	outcome = reconcile(c, pub, target_uuid, generation_uuid);
	if (outcome == DPWIN_OUTCOME_NOT_PUBLISHED && dpwin_ch_status_outcome_unknown(*status) &&
		!dpwin_chprobe_query_ids_visible(c->client))
		outcome = DPWIN_OUTCOME_PENDING;
	return outcome;
}

/*
 * Not published yet: may this generation still replace the target?  Only
 * while the target is the table it was built from: same UUID, same
 * schema, same rows outside the window; a rollback's, a kept backup, only
 * while it has the target's structure (dpwin_build_check_backup()).  A
 * refusal by admission or by the generation's check (types, an
 * unsupported table, or a target not in the state the generation was
 * built from) settles the invocation as not published (the changed target
 * is kept); an error, such as a lost connection, leaves the outcome open
 * for another try.
 */
static void
check_still_ours(Coordinator *c, const DpwinPublication *pub,
				 const char *target_uuid, const char *generation_uuid)
{
	const char *when = "between generation build and publication";
	DpwinRefusal *refusal;

	/* the generation of an earlier process: its build is not known here */
	if (c->kind == DPWIN_KIND_REFRESH)
		dpwin_build_recall_generation(c, pub->generation_table);

	refusal = readmit_target(c, when);
	if (refusal == NULL && strcmp(c->target->uuid, pub->target_uuid_before) == 0)
		refusal = c->kind == DPWIN_KIND_ROLLBACK ?
			dpwin_build_check_backup(c, pub->generation_table, NULL) :
			dpwin_generation_check_target(c->client, c->target, c->build.gen,
										  &c->ext.key, when);
	if (refusal != NULL)
	{
		c->build.outcome = DPWIN_OUTCOME_NOT_PUBLISHED;
		dpwin_admission_raise(refusal);
	}
	if (strcmp(c->target->uuid, pub->target_uuid_before) != 0)
		report_unknown(c, pub, target_uuid, generation_uuid);
}

DpwinStepResult
dpwin_step_publishing(Coordinator *c)
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
	c->build.pub = pub;

	/*
	 * Recovery reads the UUIDs first: an already published pair is recognised
	 * before any admission, so that a later legitimate schema change cannot
	 * hide it, and a pair not yet exchanged is checked again against the
	 * target.  A first run has just built and checked the generation
	 * (dpwin_step_verified) and sent no EXCHANGE yet.
	 */
	if (c->recovering)
	{
		/* The intent's EXCHANGE may still be on its way: settle it first. */
		if (pub->exchange_query_id != NULL)
			dpwin_ch_settle_query(c->client, pub->exchange_query_id);
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
		dpwin_build_name_generation(c, pub->generation_table);

		/*
		 * The exchange; after a lost reply whose statement is known to have
		 * ended without publishing, the one permitted retry.  Recovery's
		 * EXCHANGE is that retry already.
		 */
		do
		{
			query_id = tries == 0 && pub->exchange_query_id != NULL &&
				!c->recovering ? pub->exchange_query_id :
				dpwin_ch_next_query_id(c->client, "exchange");
			outcome = exchange(c, pub, query_id, &target_uuid, &generation_uuid,
							   &status, &reply);
		} while (outcome == DPWIN_OUTCOME_NOT_PUBLISHED &&
				 dpwin_ch_status_outcome_unknown(status) && !c->recovering &&
				 ++tries < 2);
	}

	switch (outcome)
	{
		case DPWIN_OUTCOME_PUBLISHED:
			c->build.outcome = DPWIN_OUTCOME_PUBLISHED;
			c->build.replaced_uuid = generation_uuid ?
				MemoryContextStrdup(c->cxt, generation_uuid) : NULL;
			c->times.publish = dpwin_seconds_since(started);

			/*
			 * Nothing reads the staging tables again: they are dropped on the
			 * second connection while the backup is renamed on the first.
			 */
			dpwin_invocation_drop_listed_start(c, pub->generation_table);

			/*
			 * Published: the outcome commits with the state, and cancellation
			 * stays held off until the process exits, so evidence and state
			 * follow the exchange without interruption.  The old table gets
			 * its backup name in the next step.
			 */
			return dpwin_step_result(DPWIN_STATE_PUBLISHED,
									 dpwin_invocation_record_outcome);
		case DPWIN_OUTCOME_PENDING:
			report_pending(c, query_id, status);
			break;
		case DPWIN_OUTCOME_NOT_PUBLISHED:

			/*
			 * The target is untouched: fail like any error before publication
			 * (coordinator_fail() journals the outcome).
			 */
			c->build.outcome = DPWIN_OUTCOME_NOT_PUBLISHED;
			RESUME_CANCEL_INTERRUPTS();

			/*
			 * The server refused the EXCHANGE itself: the next refresh asks
			 * again whether EXCHANGE TABLES works in the database, rather
			 * than trust what an earlier probe learned.
			 */
			if (status == CHHTTP_SERVER_ERROR && reply.exception_code != CH_ACCESS_DENIED)
				dpwin_exchange_probe_forget(c->client->conf->url, c->route->target_database);
			if (status != CHHTTP_OK)
				dpwin_ch_report(status, &reply, c->recovering ? "retrying the exchange" :
								"exchanging the target with its new generation");
			ereport(ERROR,
					(errcode(ERRCODE_SYSTEM_ERROR),
					 errmsg("EXCHANGE reported success but the target's UUID did not change"),
					 errdetail("The server answered the EXCHANGE of invocation %s, and the target and the generation still have their own UUIDs.",
							   dpwin_uuid_text(&c->id))));
			break;
		case DPWIN_OUTCOME_UNKNOWN:
		case DPWIN_OUTCOME_NONE:
			report_unknown(c, pub, target_uuid, generation_uuid);
			break;
	}
	pg_unreachable();
}
