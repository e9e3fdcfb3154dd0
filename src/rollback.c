/*-------------------------------------------------------------------------
 *
 * rollback.c
 *	  The coordinator's side of dpwin.rollback(route [, to_backup]): a kept
 *	  backup generation put back as the route's target (docs/design.md,
 *	  "Rolling back a generation").  The call itself is admitted before any
 *	  I/O in the caller's backend (refresh.c).
 *
 *	  The coordinator chooses the backup under the target's lease
 *	  (dpwin_rollback_choose()), registers a rollback invocation in state
 *	  verified and runs the one state machine from there: this file's step
 *	  checks the backup against the target where a refresh builds its
 *	  generation, and ends in the refresh's intent; every step from
 *	  publishing on (the EXCHANGE, the UUIDs' verdict, the name the
 *	  replaced generation is kept under, evidence, completion) and recovery
 *	  are the refresh's own.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "miscadmin.h"
#include "utils/memutils.h"

#include "bgworker.h"
#include "build.h"
#include "names.h"
#include "publication.h"
#include "registry.h"
#include "rollback.h"
#include "route_state.h"
#include "steps.h"
#include "target.h"

/* Is `name` in the list of names? */
static bool
name_listed(List *names, const char *name)
{
	ListCell   *lc;

	foreach(lc, names)
		if (strcmp((const char *) lfirst(lc), name) == 0)
			return true;
	return false;
}

/*
 * The journal's part of the choice: the route's backups newest first (in
 * c->cxt), its last published interval_end, and a refusal while another
 * invocation of the target published and has not finished: its evidence
 * and route state are to be written of the generation it published.
 */
static List *
journaled_backups(Coordinator *c, TimestampTz *interval_end)
{
	List	   *names = NIL;
	ListCell   *lc;
	char	   *unfinished;
	bool		positioned;

	dpwin_xact_begin("dpwin: reading the route's backups");
	unfinished = dpwin_registry_unfinished_publication(c->target_id, &c->id);
	if (unfinished != NULL)
		unfinished = MemoryContextStrdup(c->cxt, unfinished);
	positioned = dpwin_route_state_last(c->route->route_id, interval_end);
	foreach(lc, dpwin_publication_backups(c->route->route_id))
		names = lappend(names, MemoryContextStrdup(c->cxt, lfirst(lc)));
	dpwin_xact_commit(c->cxt);

	if (unfinished != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("invocation %s of this target has not finished its publication", unfinished),
				 errdetail("A rollback waits until the generation in place has its evidence and route state."),
				 errhint("Finish it first: SELECT * FROM dpwin.recover('%s');", unfinished)));
	if (!positioned || names == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("route \"%s\" has no completed publication to roll back", c->route->route_name)));
	return names;
}

char *
dpwin_rollback_choose(Coordinator *c, TimestampTz *interval_end)
{
	const char *db = c->route->target_database;
	List	   *journaled = journaled_backups(c, interval_end);
	List	   *existing;
	ListCell   *lc;

	existing = dpwin_target_list_tables(c->client, db, dpwin_backup_prefix(c->route->route_id));
	if (c->call->to_backup[0] != '\0')
	{
		if (!name_listed(existing, c->call->to_backup))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("backup %s of route \"%s\" does not exist",
							dpwin_ch_qualified_name(db, c->call->to_backup),
							c->route->route_name),
					 errdetail("It was dropped, or an earlier rollback put it back in the target's place."),
					 errhint("List the route's backups in ClickHouse: SELECT name FROM system.tables WHERE database = '%s' AND startsWith(name, '%s');",
							 db, dpwin_backup_prefix(c->route->route_id))));
		return pstrdup(c->call->to_backup);
	}

	/* The newest backup that still exists, by the journal's order. */
	foreach(lc, journaled)
		if (name_listed(existing, lfirst(lc)))
			return lfirst(lc);
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_TABLE),
			 errmsg("route \"%s\" has no backup left in ClickHouse", c->route->route_name),
			 errdetail("Every backup its publications kept was dropped or put back.")));
	pg_unreachable();
}

/*
 * A rollback's step in state verified, where a refresh builds its
 * generation: its generation is the backup, which is checked against the
 * target admitted now (dpwin_build_check_backup()); the replaced
 * generation will be kept under a backup name of this invocation's, so
 * that another rollback can undo this one.  Ends in the refresh's intent.
 */
DpwinStepResult
dpwin_step_rollback(Coordinator *c)
{
	DpwinPublication *pub;
	DpwinRefusal *refusal;
	DpwinTargetInfo *target;
	char	   *uuid;

	target = dpwin_extraction_admit(c->client, c->route, c->cxt, &refusal);
	if (refusal != NULL)
		dpwin_admission_raise(refusal);
	dpwin_invocation_set_target(c, target);
	refusal = dpwin_build_check_backup(c, c->rollback_backup, &uuid);
	if (refusal != NULL)
		dpwin_admission_raise(refusal);

	pub = MemoryContextAllocZero(c->cxt, sizeof(DpwinPublication));
	pub->target_uuid_before = c->target->uuid;
	pub->generation_table = c->rollback_backup;
	pub->generation_uuid = uuid;
	pub->backup_table = MemoryContextStrdup(c->cxt,
											dpwin_backup_name(c->route->route_id, &c->id,
															  c->interval_end));
	return dpwin_step_intent(c, pub);
}
