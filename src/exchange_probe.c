/*-------------------------------------------------------------------------
 *
 * exchange_probe.c
 *	  The EXCHANGE probe: does EXCHANGE TABLES work in a ClickHouse
 *	  database?  Two scratch tables are created, exchanged and dropped.  A
 *	  database where that worked is remembered in shared memory
 *	  (learned.c) by its server's URL, its name and the UUID the server
 *	  gives it, so that no later refresh asks again until PostgreSQL
 *	  restarts (docs/design.md, "The conversation with ClickHouse").  A
 *	  database dropped and created again has another UUID and is probed
 *	  again.
 *
 *	  Admission (admission.c) checks the server and the database's engine
 *	  and reads the database's UUID first; this file owns only the probe.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "utils/builtins.h"

#include "exchange_probe.h"
#include "learned.h"
#include "target.h"

static void probe_cleanup(ChClient *client, const char *qa, const char *qb,
						  MemoryContext cxt);

/* What a probe of database on the server at url is remembered under. */
static char *
probe_key(const char *url, const char *database)
{
	return psprintf("exchange probe\n%s\n%s", url, database);
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
	char	   *key = probe_key(client->conf->url, database);

	if (dpwin_learned_known(key, database_uuid))
		return;
	run_probe(client, database, name_prefix);
	dpwin_learned_remember(key, database_uuid);
}

void
dpwin_exchange_probe_forget(const char *url, const char *database)
{
	dpwin_learned_forget(probe_key(url, database));
}
