/*-------------------------------------------------------------------------
 *
 * exchange_probe.c
 *	  The EXCHANGE probe: does EXCHANGE TABLES work in a ClickHouse
 *	  database?  Two scratch tables are created, exchanged and dropped; a
 *	  database where that worked is kept in dpwin.exchange_probe by its
 *	  server, its name and the UUID the server gives it, so that no later
 *	  refresh asks again (docs/admission.md, "The EXCHANGE probe").  A
 *	  database dropped and created again has another UUID and is probed
 *	  again.
 *
 *	  Admission (admission.c) checks the server and the database's engine
 *	  and reads the database's UUID first; this file owns only the probe's
 *	  statements and its catalog row.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "utils/lsyscache.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "catalog.h"
#include "exchange_probe.h"
#include "target.h"

/*
 * Databases whose EXCHANGE worked, or that dpwin.exchange_probe named, in
 * this backend; recorded: the catalog holds the row (a probe run in a
 * read-only transaction writes it at the next call).
 */
typedef struct ProbedDatabase
{
	char	   *server_name;
	char	   *database;
	char	   *uuid;
	bool		recorded;
} ProbedDatabase;

static List *probed = NIL;

static void probe_cleanup(ChClient *client, const char *qa, const char *qb,
						  MemoryContext cxt);

/* The backend's entry for the database, or NULL. */
static ProbedDatabase *
probed_find(const char *server_name, const char *database, const char *uuid)
{
	ListCell   *lc;

	foreach(lc, probed)
	{
		ProbedDatabase *p = lfirst(lc);

		if (strcmp(p->server_name, server_name) == 0 &&
			strcmp(p->database, database) == 0 &&
			strcmp(p->uuid, uuid) == 0)
			return p;
	}
	return NULL;
}

/* Remember a database for the life of the backend. */
static ProbedDatabase *
probed_add(const char *server_name, const char *database, const char *uuid,
		   bool recorded)
{
	MemoryContext cxt = MemoryContextSwitchTo(TopMemoryContext);
	ProbedDatabase *p = palloc(sizeof(ProbedDatabase));

	p->server_name = pstrdup(server_name);
	p->database = pstrdup(database);
	p->uuid = pstrdup(uuid);
	p->recorded = recorded;
	probed = lappend(probed, p);
	MemoryContextSwitchTo(cxt);
	return p;
}

/*
 * Run one statement on dpwin.exchange_probe with $1 server, $2 database
 * and, when uuid is not NULL, $3 its UUID; in the caller's transaction
 * when there is one, else in one of its own.  Returns the rows it
 * touched.
 */
static uint64
catalog_statement(const char *sql, const char *server_name,
				  const char *database, const char *uuid)
{
	MemoryContext cxt = CurrentMemoryContext;
	bool		own = !IsTransactionState();
	Oid			types[3] = {TEXTOID, TEXTOID, TEXTOID};
	Datum		args[3];
	uint64		n;

	if (own)
		StartTransactionCommand();

	/*
	 * A catalog of an older version, which a library of this one reads only
	 * while the update is tested, has no such table: nothing is kept.
	 */
	if (!OidIsValid(get_relname_relid("exchange_probe",
									  get_namespace_oid("dpwin", false))))
	{
		if (own)
			CommitTransactionCommand();
		MemoryContextSwitchTo(cxt);
		return 0;
	}
	args[0] = CStringGetTextDatum(server_name);
	args[1] = CStringGetTextDatum(database);
	args[2] = uuid != NULL ? CStringGetTextDatum(uuid) : (Datum) 0;
	SPI_connect();
	/* a refresh's steps run outside a portal: SPI needs a snapshot */
	PushActiveSnapshot(GetTransactionSnapshot());
	n = dpwin_catalog_exec(sql, uuid != NULL ? 3 : 2, types, args, NULL, false);
	PopActiveSnapshot();
	SPI_finish();
	if (own)
		CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	return n;
}

/*
 * Write the probe's answer, unless the transaction is read-only (a
 * refresh's snapshot, which a write would not fit in): then false, and a
 * later call writes it.
 */
static bool
record_probe(ProbedDatabase *p)
{
	if (IsTransactionState() && XactReadOnly)
		return false;
	(void) catalog_statement("INSERT INTO dpwin.exchange_probe (server_name, database_name, database_uuid)"
							 " VALUES ($1::name, $2, $3::uuid) ON CONFLICT DO NOTHING",
							 p->server_name, p->database, p->uuid);
	return true;
}

/* Create, exchange and drop the two scratch tables; ereports on failure. */
static void
run_probe(ChClient *client, const char *database, const char *name_prefix)
{
	uint8		rnd[8];
	char		suffix[17];
	char	   *name_a;
	char	   *name_b;
	char	   *qa;
	char	   *qb;
	MemoryContext oldcxt = CurrentMemoryContext;
	volatile bool dropped = false;

	if (!pg_strong_random(rnd, sizeof(rnd)))
		elog(ERROR, "could not generate a random name for the EXCHANGE probe");
	hex_encode((const char *) rnd, sizeof(rnd), suffix);
	suffix[16] = '\0';
	name_a = psprintf("%sprobe_%s_a", name_prefix, suffix);
	name_b = psprintf("%sprobe_%s_b", name_prefix, suffix);
	qa = dpwin_ch_qualified_name(database, name_a);
	qb = dpwin_ch_qualified_name(database, name_b);

	PG_TRY();
	{
		ChHttpReply reply;
		ChHttpStatus status;
		char	   *uuid_a;
		char	   *uuid_b;
		char	   *after_a;
		char	   *after_b;

		dpwin_ch_exec(client, psprintf("CREATE TABLE %s (x UInt8) ENGINE = MergeTree ORDER BY tuple()", qa));
		dpwin_ch_exec(client, psprintf("CREATE TABLE %s (x UInt8) ENGINE = MergeTree ORDER BY tuple()", qb));
		dpwin_target_table_uuids(client, database, name_a, name_b, &uuid_a, &uuid_b);
		if (uuid_a == NULL || uuid_b == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("ClickHouse server \"%s\" does not show the probe tables in system.tables",
							client->conf->server_name)));

		status = dpwin_ch_try(client,
							  psprintf("EXCHANGE TABLES %s AND %s", qa, qb),
							  dpwin_ch_next_query_id(client, "probe-exchange"),
							  NULL, NULL, &reply);
		if (status == CHHTTP_SERVER_ERROR &&
			reply.exception_code != CH_ACCESS_DENIED)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("ClickHouse database %s on server \"%s\" does not support EXCHANGE TABLES",
							dpwin_ch_quote_ident(database), client->conf->server_name),
					 errdetail("The server answered: %s", reply.body.data),
					 errhint("EXCHANGE TABLES needs an Atomic database on a file system with renameat2(RENAME_EXCHANGE).")));
		else if (status != CHHTTP_OK)
			dpwin_ch_report(status, &reply, "probing EXCHANGE TABLES");

		dpwin_target_table_uuids(client, database, name_a, name_b, &after_a, &after_b);
		if (after_a == NULL || after_b == NULL ||
			strcmp(after_a, uuid_b) != 0 || strcmp(after_b, uuid_a) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("EXCHANGE TABLES on ClickHouse server \"%s\" did not swap the tables",
							client->conf->server_name),
					 errdetail("Before: %s %s, %s %s.  After: %s %s, %s %s.",
							   name_a, uuid_a, name_b, uuid_b,
							   name_a, after_a ? after_a : "(missing)",
							   name_b, after_b ? after_b : "(missing)")));

		dpwin_target_drop_tables(client, database, list_make2(name_a, name_b));
		dropped = true;
	}
	PG_CATCH();
	{
		if (!dropped)
			probe_cleanup(client, qa, qb, oldcxt);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/*
 * Drop the probe tables after an error.  Best effort: dpwin_ch_try never raises,
 * so the original error is what the caller sees.  Tables a killed process
 * leaves carry the caller's prefix (a refresh's: its invocation's, which
 * recovery drops) and hold no data.
 */
static void
probe_cleanup(ChClient *client, const char *qa, const char *qb,
			  MemoryContext cxt)
{
	MemoryContext ecxt = MemoryContextSwitchTo(cxt);
	ChHttpReply reply;

	(void) dpwin_ch_try(client, psprintf("DROP TABLE IF EXISTS %s", qa),
						dpwin_ch_next_query_id(client, "probe-drop"), NULL, NULL, &reply);
	(void) dpwin_ch_try(client, psprintf("DROP TABLE IF EXISTS %s", qb),
						dpwin_ch_next_query_id(client, "probe-drop"), NULL, NULL, &reply);
	MemoryContextSwitchTo(ecxt);
}

void
dpwin_exchange_probe(ChClient *client, const char *database,
					 const char *database_uuid, const char *name_prefix)
{
	const char *server_name = client->conf->server_name;
	ProbedDatabase *p = probed_find(server_name, database, database_uuid);

	if (p != NULL)
	{
		if (!p->recorded)
			p->recorded = record_probe(p);
		return;
	}
	if (catalog_statement("SELECT 1 FROM dpwin.exchange_probe WHERE server_name = $1::name"
						  " AND database_name = $2 AND database_uuid = $3::uuid",
						  server_name, database, database_uuid) > 0)
	{
		(void) probed_add(server_name, database, database_uuid, true);
		return;
	}

	run_probe(client, database, name_prefix);
	p = probed_add(server_name, database, database_uuid, false);
	p->recorded = record_probe(p);
}

void
dpwin_exchange_probe_forget(const char *server_name, const char *database)
{
	ListCell   *lc;

	foreach(lc, probed)
	{
		ProbedDatabase *p = lfirst(lc);

		if (strcmp(p->server_name, server_name) == 0 &&
			strcmp(p->database, database) == 0)
			probed = foreach_delete_current(probed, lc);
	}
	(void) catalog_statement("DELETE FROM dpwin.exchange_probe WHERE server_name = $1::name"
							 " AND database_name = $2",
							 server_name, database, NULL);
}
