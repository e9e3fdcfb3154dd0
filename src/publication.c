/*-------------------------------------------------------------------------
 *
 * publication.c
 *	  Publication intents and outcomes (dpwin.publication): the intent is
 *	  durable before the EXCHANGE can run, and the outcome, judged from the
 *	  tables' UUIDs, is journaled once known.  Writes are fenced by the
 *	  target's lease epoch (lease.h).
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "lease.h"
#include "publication.h"

static const char *const outcome_names[] = {
	[DPWIN_OUTCOME_NONE] = "none",
	[DPWIN_OUTCOME_PUBLISHED] = "published",
	[DPWIN_OUTCOME_NOT_PUBLISHED] = "not_published",
	[DPWIN_OUTCOME_UNKNOWN] = "unknown",
	[DPWIN_OUTCOME_PENDING] = "pending",
};

const char *
dpwin_publication_outcome_name(DpwinOutcome outcome)
{
	Assert(outcome >= DPWIN_OUTCOME_NONE && outcome <= DPWIN_OUTCOME_PENDING);
	return outcome_names[outcome];
}

void
dpwin_publication_intent(const pg_uuid_t *id, int32 target_id, int64 epoch,
						 const DpwinPublication *pub,
						 const char *exchange_query_id)
{
	Oid			types[8] = {
		UUIDOID, INT4OID, UUIDOID, TEXTOID, UUIDOID, TEXTOID,
		INT8OID, TEXTOID
	};
	Datum		args[8];

	dpwin_lease_check_epoch(target_id, epoch);
	args[0] = UUIDPGetDatum(dpwin_uuid_copy(id));
	args[1] = Int32GetDatum(target_id);
	args[2] = DirectFunctionCall1(uuid_in, CStringGetDatum(pub->target_uuid_before));
	args[3] = CStringGetTextDatum(pub->generation_table);
	args[4] = DirectFunctionCall1(uuid_in, CStringGetDatum(pub->generation_uuid));
	args[5] = CStringGetTextDatum(pub->backup_table);
	args[6] = Int64GetDatum(epoch);
	args[7] = CStringGetTextDatum(exchange_query_id);
	dpwin_catalog_exec("INSERT INTO dpwin.publication (invocation_id, target_id,"
					   " target_uuid_before, generation_table, generation_uuid,"
					   " backup_table, lease_epoch, exchange_query_id)"
					   " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
					   " ON CONFLICT (invocation_id) DO UPDATE SET"
					   "   target_uuid_before = EXCLUDED.target_uuid_before,"
					   "   generation_table = EXCLUDED.generation_table,"
					   "   generation_uuid = EXCLUDED.generation_uuid,"
					   "   backup_table = EXCLUDED.backup_table,"
					   "   lease_epoch = EXCLUDED.lease_epoch,"
					   "   exchange_query_id = EXCLUDED.exchange_query_id,"
					   "   intent_at = clock_timestamp(), outcome = NULL, observed_at = NULL"
					   " WHERE dpwin.publication.outcome IS DISTINCT FROM 'published'",
					   8, types, args, NULL, false);
}

DpwinOutcome
dpwin_publication_judge(const DpwinPublication *pub, const char *target_uuid,
						const char *generation_uuid)
{
	if (target_uuid && strcmp(target_uuid, pub->generation_uuid) == 0)
		return DPWIN_OUTCOME_PUBLISHED;
	if (target_uuid && strcmp(target_uuid, pub->target_uuid_before) == 0 &&
		generation_uuid && strcmp(generation_uuid, pub->generation_uuid) == 0)
		return DPWIN_OUTCOME_NOT_PUBLISHED;
	return DPWIN_OUTCOME_UNKNOWN;
}

/* Columns of dpwin_publication_load()'s query. */
#define Anum_publication_target_uuid_before	1
#define Anum_publication_generation_table	2
#define Anum_publication_generation_uuid	3
#define Anum_publication_backup_table		4
#define Anum_publication_outcome			5
#define Anum_publication_lease_epoch		6
#define Anum_publication_exchange_query_id	7

DpwinPublication *
dpwin_publication_load(const pg_uuid_t *id)
{
	Oid			types[1] = {UUIDOID};
	Datum		args[1];
	DpwinPublication *pub;
	char	   *outcome;
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext spicxt;

	args[0] = UUIDPGetDatum(dpwin_uuid_copy(id));
	if (dpwin_catalog_exec("SELECT target_uuid_before::text, generation_table,"
						   " generation_uuid::text, backup_table, outcome, lease_epoch,"
						   " exchange_query_id"
						   " FROM dpwin.publication WHERE invocation_id = $1",
						   1, types, args, NULL, false) != 1)
		return NULL;
	/* in the caller's context: SPI_finish frees SPI's (see above) */
	spicxt = MemoryContextSwitchTo(caller);
	pub = palloc0(sizeof(DpwinPublication));
	pub->target_uuid_before = dpwin_catalog_text(0, Anum_publication_target_uuid_before);
	pub->generation_table = dpwin_catalog_text(0, Anum_publication_generation_table);
	pub->generation_uuid = dpwin_catalog_text(0, Anum_publication_generation_uuid);
	pub->backup_table = dpwin_catalog_text(0, Anum_publication_backup_table);
	outcome = dpwin_catalog_text(0, Anum_publication_outcome);
	pub->outcome = DPWIN_OUTCOME_NONE;
	for (int o = DPWIN_OUTCOME_PUBLISHED; outcome && o <= DPWIN_OUTCOME_UNKNOWN; o++)
		if (strcmp(outcome, dpwin_publication_outcome_name((DpwinOutcome) o)) == 0)
			pub->outcome = (DpwinOutcome) o;
	pub->lease_epoch = dpwin_catalog_int64(0, Anum_publication_lease_epoch);
	pub->exchange_query_id = dpwin_catalog_text(0, Anum_publication_exchange_query_id);
	MemoryContextSwitchTo(spicxt);
	return pub;
}

void
dpwin_publication_outcome(const pg_uuid_t *id, int32 target_id, int64 epoch,
						  DpwinOutcome outcome)
{
	Oid			types[2] = {UUIDOID, TEXTOID};
	Datum		args[2];

	Assert(outcome != DPWIN_OUTCOME_NONE && outcome != DPWIN_OUTCOME_PENDING);
	dpwin_lease_check_epoch(target_id, epoch);
	args[0] = UUIDPGetDatum(dpwin_uuid_copy(id));
	args[1] = CStringGetTextDatum(dpwin_publication_outcome_name(outcome));
	dpwin_catalog_exec("UPDATE dpwin.publication SET outcome = $2,"
					   " observed_at = clock_timestamp()"
					   " WHERE invocation_id = $1",
					   2, types, args, NULL, false);
}

List *
dpwin_publication_backups(int32 route_id)
{
	Oid			types[1] = {INT4OID};
	Datum		args[1];
	List	   *names = NIL;
	uint64		n;

	args[0] = Int32GetDatum(route_id);
	n = dpwin_catalog_exec("SELECT p.backup_table FROM dpwin.publication p"
						   " JOIN dpwin.invocation i USING (invocation_id)"
						   " WHERE i.route_id = $1 AND p.outcome = 'published'"
						   " ORDER BY p.intent_at DESC",
						   1, types, args, NULL, true);
	for (uint64 i = 0; i < n; i++)
		names = lappend(names, dpwin_catalog_text(i, 1));
	return names;
}
