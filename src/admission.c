/*-------------------------------------------------------------------------
 *
 * admission.c
 *	  Admission of a ClickHouse target before any data moves: the server's
 *	  version and functions, the database engine, the table's engine,
 *	  columns and type parity, TTL, projections, dependent views, computed
 *	  columns, active mutations and row policies; and, before the EXCHANGE
 *	  probe (exchange_probe.c), the same checks of the target's database.
 *	  Reads system tables only.
 *
 *	  Every statement goes through chclient; every identifier is quoted
 *	  with dpwin_ch_quote_ident() and every string with dpwin_ch_quote_literal(), so
 *	  names with quotes, backticks, semicolons or any UTF-8 are safe.
 *
 *	  docs/admission.md explains each admission rule and why it exists.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "admission.h"
#include "chtype.h"
#include "ctq.h"
#include "digest.h"
#include "exchange_probe.h"

/*
 * Oldest server dpwin admits.  23.3 (LTS) has Atomic databases by default,
 * DateTime64 with a time zone, EXCHANGE TABLES, every system table the
 * admission reads and every setting chclient pins on each request; the
 * functions the digest needs are checked by name as well.
 */
#define DPWIN_CH_MIN_MAJOR	23
#define DPWIN_CH_MIN_MINOR	3

/* ClickHouse's UNKNOWN_TABLE: a system table this server does not have. */
#define CH_UNKNOWN_TABLE	60

/*
 * Functions the refresh needs, with what needs them (for messages) and a
 * call of each that a server knowing the function can analyze.
 */
static const struct
{
	const char *name;
	const char *purpose;
	const char *call;
}			required_functions[] =

{
	{"sipHash128ReferenceKeyed", "the typed multiset digest", "sipHash128ReferenceKeyed((toUInt64(0), toUInt64(0)), '')"},
	{"sipHash64Keyed", "the typed multiset digest of an invocation of dpwin 0.1", "sipHash64Keyed((toUInt64(0), toUInt64(0)), '')"},
	{"formatRow", "the typed multiset digest", "formatRow('RowBinary', toUInt8(0))"},
	{"fromUnixTimestamp64Micro", "the window bounds", "fromUnixTimestamp64Micro(toInt64(0), 'UTC')"},
};

/* What the first round trip learned about the server. */
typedef struct ServerFacts
{
	char	   *version;
	bool		has_projections_table;
} ServerFacts;

/* One target column as system.columns shows it. */
typedef struct TargetColumn
{
	int			position;
	char	   *name;
	char	   *type;
	char	   *default_kind;
} TargetColumn;

/* What read_target_facts() learned of the target. */
typedef struct TargetFacts
{
	char	   *db_engine;		/* NULL: no such database */
	List	   *table_row;		/* system.tables row; NIL: no such table */
	List	   *columns;		/* TargetColumn, sorted by position */
	List	   *mv_readers;		/* qualified names */
	List	   *mv_writers;
	List	   *mutations;		/* "id (command)" */
	List	   *projections;	/* quoted names */
	bool		policies_read;	/* system.row_policies was readable */
	List	   *row_policies;	/* names of the policies found there */
} TargetFacts;

/*
 * The UUID of each database admission read in this backend, as
 * system.databases gives it, for the EXCHANGE probe that follows the
 * admission of a target there (dpwin_admission_probe_exchange()).
 */
typedef struct SeenDatabase
{
	char	   *server_name;
	char	   *database;
	char	   *uuid;
} SeenDatabase;

static List *seen_databases = NIL;

static DpwinRefusal *refuse(int sqlerrcode, char *message, char *detail,
							char *hint);
static DpwinRefusal *check_server(ChClient *client, ChClient *via,
								  ServerFacts *facts);
static char *mv_target_condition(const char *database, const char *table);
static DpwinRefusal *check_ttl(ChClient *client, const char *qname,
							   const char *create_query);
static DpwinRefusal *check_row_policies(ChClient *client, const TargetFacts *f,
										const char *qname);
static bool parse_window_type(const char *type, int *precision,
							  bool *nullable, char **tz);
static char *schema_fingerprint(int ncolumns, char **names, char **types,
								const char *engine_full,
								const char *create_query);
static int	compare_columns_by_position(const ListCell *a, const ListCell *b);
static char *names_list(List *names);
static DpwinRefusal *check_database(const char *database, const char *engine,
									const char *qname);


/* ----------------------------------------------------------------------
 * Small helpers
 * ----------------------------------------------------------------------
 */

/*
 * A refusal as a value (admission.h); detail and hint may be NULL.  The
 * strings are formatted by the caller, as errmsg() would format them.
 */
static DpwinRefusal *
refuse(int sqlerrcode, char *message, char *detail, char *hint)
{
	DpwinRefusal *r = palloc(sizeof(DpwinRefusal));

	r->sqlerrcode = sqlerrcode;
	r->message = message;
	r->detail = detail;
	r->hint = hint;
	return r;
}

void
dpwin_admission_raise(const DpwinRefusal *refusal)
{
	ereport(ERROR,
			(errcode(refusal->sqlerrcode),
			 errmsg_internal("%s", refusal->message),
			 refusal->detail ? errdetail_internal("%s", refusal->detail) : 0,
			 refusal->hint ? errhint("%s", refusal->hint) : 0));
	pg_unreachable();
}

/* Comma-separated list of C strings, for error details. */
static char *
names_list(List *names)
{
	StringInfoData buf;
	ListCell   *lc;

	initStringInfo(&buf);
	foreach(lc, names)
	{
		if (buf.len > 0)
			appendStringInfoString(&buf, ", ");
		appendStringInfoString(&buf, (const char *) lfirst(lc));
	}
	return buf.data;
}

/*
 * SQL condition on system.tables.create_table_query that is true for a
 * materialized view writing into database.table ("... TO db.t (...").
 * ClickHouse prints a name bare when it is a plain word and not a keyword,
 * else in backticks; versions differ on keywords, so both spellings of
 * each part are tried.
 */
static char *
mv_target_condition(const char *database, const char *table)
{
	const char *dbs[2];
	const char *tbs[2];
	int			ndb = 0,
				ntb = 0;
	StringInfoData buf;

	dbs[ndb++] = dpwin_ctq_format_ident(database);
	if (dpwin_ctq_is_bare_word(database))
		dbs[ndb++] = database;
	tbs[ntb++] = dpwin_ctq_format_ident(table);
	if (dpwin_ctq_is_bare_word(table))
		tbs[ntb++] = table;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '(');
	for (int i = 0; i < ndb; i++)
	{
		for (int j = 0; j < ntb; j++)
		{
			char	   *needle = psprintf(" TO %s.%s ", dbs[i], tbs[j]);

			if (i > 0 || j > 0)
				appendStringInfoString(&buf, " OR ");
			appendStringInfo(&buf, "position(create_table_query, %s) > 0",
							 dpwin_ch_quote_literal(needle));
		}
	}
	appendStringInfoChar(&buf, ')');
	return buf.data;
}


/* ----------------------------------------------------------------------
 * Server checks
 * ----------------------------------------------------------------------
 */

/*
 * The statement of the first round trip: the version, whether
 * system.projections exists, and the required functions the server has,
 * as "a,b,c": by calling every one of them (which fails with
 * UNKNOWN_FUNCTION if one is missing), or, with from_catalog, from
 * system.functions.
 */
static char *
server_facts_sql(bool from_catalog)
{
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfoString(&sql,
						   "SELECT version(), "
						   "(SELECT count() FROM system.tables WHERE database = 'system' AND name = 'projections'), ");
	if (from_catalog)
	{
		appendStringInfoString(&sql, "(SELECT arrayStringConcat(groupArray(name), ',') FROM system.functions WHERE name IN (");
		for (int i = 0; i < (int) lengthof(required_functions); i++)
			appendStringInfo(&sql, "%s%s", i > 0 ? ", " : "",
							 dpwin_ch_quote_literal(required_functions[i].name));
		appendStringInfoString(&sql, "))");
		return sql.data;
	}
	appendStringInfoString(&sql, "if(isNull(tuple(");
	for (int i = 0; i < (int) lengthof(required_functions); i++)
		appendStringInfo(&sql, "%s%s", i > 0 ? ", " : "", required_functions[i].call);
	appendStringInfoString(&sql, ")), '', '");
	for (int i = 0; i < (int) lengthof(required_functions); i++)
		appendStringInfo(&sql, "%s%s", i > 0 ? "," : "", required_functions[i].name);
	appendStringInfoString(&sql, "')");
	return sql.data;
}

/*
 * First round trip: version, functions the refresh relies on, and whether
 * system.projections exists.  Refuses a server that is too old before
 * anything is written.  The statements go over `via`, and `client`
 * remembers the answer (they are one client but on a first admission,
 * admit_first()).
 */
static DpwinRefusal *
check_server(ChClient *client, ChClient *via, ServerFacts *facts)
{
	ChHttpReply reply;
	ChHttpStatus status;
	char	   *answer;
	List	   *rows;
	List	   *row;
	int			major = 0,
				minor = 0;
	const char *present;
	List	   *missing = NIL;

	/* accepted earlier in this run: the server does not change under it */
	if (client->server_version != NULL)
	{
		facts->version = client->server_version;
		facts->has_projections_table = client->server_has_projections;
		return NULL;
	}

	/*
	 * The functions are named by calling them: reading system.functions
	 * builds a row of every function the server has, 20 ms or more on the
	 * first statement of every refresh.  A server that lacks one refuses
	 * the call with UNKNOWN_FUNCTION, and only then is system.functions
	 * asked which ones are there.
	 */
	status = dpwin_ch_try(via, server_facts_sql(false),
						  dpwin_ch_next_query_id(via, "admit-version"),
						  NULL, NULL, &reply);
	if (status == CHHTTP_SERVER_ERROR &&
		reply.exception_code == CH_UNKNOWN_FUNCTION)
		status = dpwin_ch_try(via, server_facts_sql(true),
							  dpwin_ch_next_query_id(via, "admit-version"),
							  NULL, NULL, &reply);

	/*
	 * A server older than the settings chclient pins refuses every request
	 * with UNKNOWN_SETTING: say that it is too old rather than relaying a
	 * message about a setting the user never chose.
	 */
	if (status == CHHTTP_SERVER_ERROR &&
		reply.exception_code == CH_UNKNOWN_SETTING)
		return refuse(ERRCODE_FEATURE_NOT_SUPPORTED,
					  psprintf("ClickHouse server \"%s\" is too old for dpwin",
							   client->conf->server_name),
					  psprintf("The server does not know a setting dpwin sends with every request; dpwin needs ClickHouse %d.%d or later.  The server answered: %s",
							   DPWIN_CH_MIN_MAJOR, DPWIN_CH_MIN_MINOR,
							   reply.body.data),
					  NULL);
	if (status != CHHTTP_OK)
		dpwin_ch_report(status, &reply, "reading the server version");
	answer = reply.body.data;
	rows = dpwin_ch_parse_tsv(answer);
	if (list_length(rows) != 1 || list_length((List *) linitial(rows)) != 3)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("unexpected answer from ClickHouse server \"%s\" to the version query",
						client->conf->server_name)));
	row = (List *) linitial(rows);

	facts->version = pstrdup(dpwin_ch_row_field(row, 0));
	facts->has_projections_table = strcmp(dpwin_ch_row_field(row, 1), "0") != 0;

	if (sscanf(facts->version, "%d.%d", &major, &minor) != 2 ||
		major < DPWIN_CH_MIN_MAJOR ||
		(major == DPWIN_CH_MIN_MAJOR && minor < DPWIN_CH_MIN_MINOR))
		return refuse(ERRCODE_FEATURE_NOT_SUPPORTED,
					  psprintf("ClickHouse server \"%s\" is too old for dpwin",
							   client->conf->server_name),
					  psprintf("The server reports version %s; dpwin needs %d.%d or later (Atomic databases, DateTime64 with a time zone, EXCHANGE TABLES, keyed SipHash).",
							   facts->version, DPWIN_CH_MIN_MAJOR, DPWIN_CH_MIN_MINOR),
					  NULL);

	present = dpwin_ch_row_field(row, 2);
	for (int i = 0; i < (int) lengthof(required_functions); i++)
	{
		const char *name = required_functions[i].name;
		const char *p = present;
		size_t		len = strlen(name);
		bool		found = false;

		/* present is "a,b,c"; function names contain no commas */
		while (*p)
		{
			const char *end = strchr(p, ',');
			size_t		plen = end ? (size_t) (end - p) : strlen(p);

			if (plen == len && memcmp(p, name, len) == 0)
			{
				found = true;
				break;
			}
			if (!end)
				break;
			p = end + 1;
		}
		if (!found)
			missing = lappend(missing,
							  psprintf("%s (%s)", name,
									   required_functions[i].purpose));
	}
	if (missing != NIL)
		return refuse(ERRCODE_FEATURE_NOT_SUPPORTED,
					  psprintf("ClickHouse server \"%s\" (version %s) lacks functions dpwin needs",
							   client->conf->server_name, facts->version),
					  psprintf("Missing: %s.", names_list(missing)),
					  pstrdup("Upgrade the ClickHouse server."));
	client->server_version = MemoryContextStrdup(GetMemoryChunkContext(client),
												 facts->version);
	client->server_has_projections = facts->has_projections_table;
	return NULL;
}

/*
 * The target's database must exist and be Atomic.  engine is NULL when it
 * does not exist; qname names the target in messages when known.  A
 * missing database (like a missing table, check_table) is an error, not a
 * refusal: a target that is gone refuses no generation, and publication
 * leaves the outcome open for the UUIDs to settle (publish.c).
 */
static DpwinRefusal *
check_database(const char *database, const char *engine, const char *qname)
{
	char	   *what = (qname
						? psprintf("ClickHouse database %s of target %s", dpwin_ch_quote_ident(database), qname)
						: psprintf("ClickHouse database %s", dpwin_ch_quote_ident(database)));

	if (engine == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("%s does not exist", what),
				 errhint("Create it with CREATE DATABASE %s ENGINE = Atomic.",
						 dpwin_ch_quote_ident(database))));
	if (strcmp(engine, "Atomic") != 0)
		return refuse(ERRCODE_FEATURE_NOT_SUPPORTED,
					  psprintf("%s has engine %s, not Atomic", what, engine),
					  pstrdup("dpwin publishes with EXCHANGE TABLES, which swaps two tables atomically only in an Atomic database."),
					  NULL);
	return NULL;
}

/*
 * Table or column TTL.  A bare upper-case TTL in create_table_query is
 * either the keyword or a column named TTL used in an expression (a
 * column named "ttl" prints in lower case and never matches).  Only when
 * the word is there do we ask the server, which parses its own SQL:
 * EXPLAIN AST shows a table TTL as TTLElement nodes, and DESCRIBE shows a
 * column TTL as ttl_expression.
 */
static DpwinRefusal *
check_ttl(ChClient *client, const char *qname, const char *create_query)
{
	char	   *answer;
	List	   *rows;
	ListCell   *lc;
	List	   *column_ttls = NIL;
	char	   *p;

	if (!dpwin_ctq_has_bare_word(create_query, "TTL"))
		return NULL;

	answer = dpwin_ch_exec(client, psprintf("EXPLAIN AST %s", create_query));
	for (p = answer; p && *p;)
	{
		char	   *line = p;
		char	   *nl = strchr(p, '\n');

		while (*line == ' ')
			line++;
		if (strncmp(line, "TTLElement", 10) == 0 &&
			(line[10] == ' ' || line[10] == '\n' || line[10] == '\0'))
			return refuse(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
						  psprintf("ClickHouse target %s has a table TTL", qname),
						  pstrdup("A TTL deletes or moves rows of the published generation behind dpwin's verification."),
						  psprintf("Remove it with ALTER TABLE %s REMOVE TTL, or refresh another table.",
								   qname));
		p = nl ? nl + 1 : NULL;
	}

	answer = dpwin_ch_exec(client, psprintf("DESCRIBE TABLE %s", qname));
	rows = dpwin_ch_parse_tsv(answer);
	foreach(lc, rows)
	{
		List	   *row = (List *) lfirst(lc);

		/* name, type, default_type, default_expression, comment, codec, ttl */
		if (dpwin_ch_row_field(row, 6)[0] != '\0')
			column_ttls = lappend(column_ttls,
								  dpwin_ch_quote_ident(dpwin_ch_row_field(row, 0)));
	}
	if (column_ttls != NIL)
		return refuse(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					  psprintf("ClickHouse target %s has a column TTL", qname),
					  psprintf("Columns with a TTL: %s.  A TTL resets values of the published generation behind dpwin's verification.",
							   names_list(column_ttls)),
					  psprintf("Remove it with ALTER TABLE %s MODIFY COLUMN ... REMOVE TTL.",
							   qname));
	return NULL;
}

/*
 * Row policies on the table or its database, as read_target_facts() found
 * them in system.row_policies.  Reading that table needs SHOW ROW POLICIES;
 * without it, ask the planner whether a row-level filter applies to our
 * own reads, which is what would silently drop rows from the generation.
 */
static DpwinRefusal *
check_row_policies(ChClient *client, const TargetFacts *f, const char *qname)
{
	char	   *plan;

	if (f->policies_read)
	{
		if (f->row_policies != NIL)
			return refuse(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
						  psprintf("ClickHouse target %s has row policies", qname),
						  psprintf("Row policies: %s.  A policy filters the rows dpwin copies into the replacement generation.",
								   names_list(f->row_policies)),
						  pstrdup("Drop the row policies on the target, or refresh another table."));
		return NULL;
	}

	/* No SHOW ROW POLICIES: does a row-level filter apply to us? */
	plan = dpwin_ch_exec(client,
						 psprintf("EXPLAIN actions = 1 SELECT * FROM %s", qname));
	for (char *c = plan; *c; c++)
		*c = pg_ascii_tolower((unsigned char) *c);
	if (strstr(plan, "row level filter") != NULL ||
		strstr(plan, "row-level security filter") != NULL ||
		strstr(plan, "row-level filter") != NULL)
		return refuse(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					  psprintf("ClickHouse target %s has a row policy that filters dpwin's reads",
							   qname),
					  pstrdup("The query plan of a read from the target contains a row-level filter.  A policy filters the rows dpwin copies into the replacement generation."),
					  pstrdup("Drop the row policies on the target, or refresh another table."));
	return NULL;
}

/*
 * Parse "DateTime64(p, 'tz')", "DateTime64(p)" and their Nullable(...)
 * forms as system.columns prints them.  *tz is NULL without a time zone.
 */
static bool
parse_window_type(const char *type, int *precision, bool *nullable, char **tz)
{
	const char *p = type;
	const char *q;
	int			prec = 0;
	int			ndigits = 0;

	*nullable = false;
	*tz = NULL;
	if (strncmp(p, "Nullable(", 9) == 0)
	{
		*nullable = true;
		p += 9;
	}
	if (strncmp(p, "DateTime64(", 11) != 0)
		return false;
	p += 11;
	while (*p >= '0' && *p <= '9' && ndigits < 3)
	{
		prec = prec * 10 + (*p - '0');
		p++;
		ndigits++;
	}
	if (ndigits == 0)
		return false;
	if (strncmp(p, ", '", 3) == 0)
	{
		p += 3;
		q = strchr(p, '\'');
		if (q == NULL)
			return false;
		*tz = pnstrdup(p, q - p);
		p = q + 1;
	}
	if (*p != ')')
		return false;
	p++;
	if (*nullable)
	{
		if (*p != ')')
			return false;
		p++;
	}
	if (*p != '\0')
		return false;
	*precision = prec;
	return true;
}

/*
 * SHA-256 (hex) over the column names and types, engine_full and the body
 * of create_table_query (indices, constraints, codecs, settings, comments),
 * each piece length-prefixed so that no two schemas hash the same text.
 * Independent of the table's name: a CREATE TABLE AS copy has the same
 * fingerprint as its original.
 */
static char *
schema_fingerprint(int ncolumns, char **names, char **types,
				   const char *engine_full, const char *create_query)
{
	StringInfoData buf;
	char	   *body = dpwin_ctq_body(create_query);
	char	   *hex;

	initStringInfo(&buf);
	appendStringInfo(&buf, "dpwin-schema-v1\n%d\n", ncolumns);
	for (int i = 0; i < ncolumns; i++)
	{
		appendStringInfo(&buf, "%zu:%s\n", strlen(names[i]), names[i]);
		appendStringInfo(&buf, "%zu:%s\n", strlen(types[i]), types[i]);
	}
	appendStringInfo(&buf, "%zu:%s\n", strlen(engine_full), engine_full);
	if (body == NULL)
		body = pstrdup(create_query);
	appendStringInfo(&buf, "%zu:%s\n", strlen(body), body);

	hex = dpwin_sha256_hex(buf.data, buf.len);
	pfree(buf.data);
	return hex;
}

static int
compare_columns_by_position(const ListCell *a, const ListCell *b)
{
	const TargetColumn *ca = (const TargetColumn *) lfirst(a);
	const TargetColumn *cb = (const TargetColumn *) lfirst(b);

	return (ca->position > cb->position) - (ca->position < cb->position);
}


/* ----------------------------------------------------------------------
 * Admission
 *
 * dpwin_admission_try_admit() runs the steps below in the order of the rules
 * in docs/admission.md; the first refusal ends it and is returned.  What
 * is not a verdict on the target (a failed request, an answer that cannot
 * be read, a target that does not exist) is raised as an error.
 * ----------------------------------------------------------------------
 */

/* Columns of the 'T' row of the admission statement. */
#define TROW_ENGINE			1
#define TROW_ENGINE_FULL	2
#define TROW_PARTITION_KEY	3
#define TROW_SORTING_KEY	4
#define TROW_UUID			5
#define TROW_CREATE_QUERY	6

/*
 * Everything system tables can tell about the target in one statement,
 * one tagged row per fact: D database, U the database's UUID, T table, C
 * column, R materialized view reading from the table, W materialized view
 * writing into it, X unfinished mutation, P projection (with projections:
 * from system.projections), Y row policy (with policies: from
 * system.row_policies).
 */
static char *
target_facts_sql(const char *db, const char *tb, bool projections,
				 bool policies)
{
	char	   *ldb = dpwin_ch_quote_literal(db);
	char	   *ltb = dpwin_ch_quote_literal(tb);
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "SELECT 'D', engine, '', '', '', '', '' FROM system.databases WHERE name = %s\n"
					 "UNION ALL SELECT 'U', toString(uuid), '', '', '', '', '' FROM system.databases WHERE name = %s\n"
					 "UNION ALL SELECT 'T', engine, engine_full, partition_key, sorting_key, toString(uuid), create_table_query "
					 "FROM system.tables WHERE database = %s AND name = %s\n"
					 "UNION ALL SELECT 'C', name, type, default_kind, toString(position), '', '' "
					 "FROM system.columns WHERE database = %s AND `table` = %s\n"
					 "UNION ALL SELECT 'R', dep_db, dep_table, '', '', '', '' "
					 "FROM system.tables ARRAY JOIN dependencies_database AS dep_db, dependencies_table AS dep_table "
					 "WHERE database = %s AND name = %s\n"
					 "UNION ALL SELECT 'W', database, name, '', '', '', '' "
					 "FROM system.tables WHERE engine = 'MaterializedView' AND %s\n"
					 "UNION ALL SELECT 'X', mutation_id, substring(command, 1, 200), '', '', '', '' "
					 "FROM system.mutations WHERE database = %s AND `table` = %s AND is_done = 0",
					 ldb, ldb, ldb, ltb, ldb, ltb, ldb, ltb,
					 mv_target_condition(db, tb), ldb, ltb);
	if (projections)
		appendStringInfo(&sql,
						 "\nUNION ALL SELECT 'P', name, '', '', '', '', '' "
						 "FROM system.projections WHERE database = %s AND `table` = %s",
						 ldb, ltb);
	if (policies)
		appendStringInfo(&sql,
						 "\nUNION ALL SELECT 'Y', name, '', '', '', '', '' "
						 "FROM system.row_policies "
						 "WHERE database = %s AND (`table` = %s OR `table` = '')",
						 ldb, ltb);
	return sql.data;
}

/* Note the database's UUID for the EXCHANGE probe (seen_databases). */
static void
note_database_uuid(ChClient *client, const char *db, const char *uuid)
{
	MemoryContext cxt;
	SeenDatabase *seen = NULL;
	ListCell   *lc;

	foreach(lc, seen_databases)
	{
		SeenDatabase *d = lfirst(lc);

		if (strcmp(d->server_name, client->conf->server_name) == 0 &&
			strcmp(d->database, db) == 0)
			seen = d;
	}
	if (seen != NULL && strcmp(seen->uuid, uuid) == 0)
		return;
	cxt = MemoryContextSwitchTo(TopMemoryContext);
	if (seen == NULL)
	{
		seen = palloc(sizeof(SeenDatabase));
		seen->server_name = pstrdup(client->conf->server_name);
		seen->database = pstrdup(db);
		seen_databases = lappend(seen_databases, seen);
	}
	else
		pfree(seen->uuid);
	seen->uuid = pstrdup(uuid);
	MemoryContextSwitchTo(cxt);
}

/*
 * Read the target's facts (target_facts_sql()) into f.  started: the
 * statement was started on the client already (admit_first()), with the
 * projections whether or not the server has system.projections.  A
 * statement refused for a system table the user may not read
 * (system.row_policies) or the server does not have (system.projections)
 * is asked again without it.
 */
static void
read_target_facts(ChClient *client, const char *db, const char *tb,
				  const ServerFacts *server, bool started, const char *qname,
				  TargetFacts *f)
{
	bool		projections = started || server->has_projections_table;
	ListCell   *lc;
	ChHttpReply reply;
	ChHttpStatus status;

	memset(f, 0, sizeof(*f));

	/*
	 * Rule 14's row policies in the same statement, unless this run already
	 * learned that the user may not read system.row_policies.
	 */
	f->policies_read = !client->row_policies_denied;
	for (;;)
	{
		if (started)
			status = dpwin_ch_finish_status(client, &reply);
		else
			status = dpwin_ch_try(client,
								  target_facts_sql(db, tb, projections, f->policies_read),
								  dpwin_ch_next_query_id(client, "admit"),
								  NULL, NULL, &reply);
		started = false;
		if (status == CHHTTP_SERVER_ERROR &&
			reply.exception_code == CH_ACCESS_DENIED && f->policies_read)
		{
			client->row_policies_denied = true;
			f->policies_read = false;
			continue;
		}
		if (status == CHHTTP_SERVER_ERROR &&
			reply.exception_code == CH_UNKNOWN_TABLE && projections &&
			!server->has_projections_table)
		{
			projections = false;
			continue;
		}
		if (status != CHHTTP_OK)
			dpwin_ch_report(status, &reply,
							psprintf("reading what system tables say of %s", qname));
		break;
	}

	foreach(lc, dpwin_ch_parse_tsv(reply.body.data))
	{
		List	   *row = (List *) lfirst(lc);
		const char *tag = dpwin_ch_row_field(row, 0);
		TargetColumn *c;

		switch (tag[0])
		{
			case 'D':
				f->db_engine = pstrdup(dpwin_ch_row_field(row, 1));
				break;
			case 'U':
				note_database_uuid(client, db, dpwin_ch_row_field(row, 1));
				break;
			case 'T':
				f->table_row = row;
				break;
			case 'C':
				c = palloc0(sizeof(TargetColumn));
				c->name = pstrdup(dpwin_ch_row_field(row, 1));
				c->type = pstrdup(dpwin_ch_row_field(row, 2));
				c->default_kind = pstrdup(dpwin_ch_row_field(row, 3));
				c->position = pg_strtoint32(dpwin_ch_row_field(row, 4));
				f->columns = lappend(f->columns, c);
				break;
			case 'R':
				f->mv_readers = lappend(f->mv_readers,
										dpwin_ch_qualified_name(dpwin_ch_row_field(row, 1),
																dpwin_ch_row_field(row, 2)));
				break;
			case 'W':
				f->mv_writers = lappend(f->mv_writers,
										dpwin_ch_qualified_name(dpwin_ch_row_field(row, 1),
																dpwin_ch_row_field(row, 2)));
				break;
			case 'X':
				f->mutations = lappend(f->mutations,
									   psprintf("%s (%s)", dpwin_ch_row_field(row, 1),
												dpwin_ch_row_field(row, 2)));
				break;
			case 'P':
				f->projections = lappend(f->projections,
										 dpwin_ch_quote_ident(dpwin_ch_row_field(row, 1)));
				break;
			case 'Y':
				f->row_policies = lappend(f->row_policies,
										  pstrdup(dpwin_ch_row_field(row, 1)));
				break;
			default:
				ereport(ERROR,
						(errcode(ERRCODE_PROTOCOL_VIOLATION),
						 errmsg("unexpected answer from ClickHouse to the admission query of %s",
								qname)));
		}
	}
	list_sort(f->columns, compare_columns_by_position);
}

/* Rules 4-5: the table exists (else an error) and is a plain MergeTree. */
static DpwinRefusal *
check_table(const TargetFacts *f, const char *qname)
{
	const char *engine;

	if (f->table_row == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("ClickHouse target %s does not exist", qname)));
	engine = dpwin_ch_row_field(f->table_row, TROW_ENGINE);
	if (strcmp(engine, "MergeTree") != 0)
		return refuse(ERRCODE_FEATURE_NOT_SUPPORTED,
					  psprintf("ClickHouse target %s has engine %s; dpwin refreshes only plain MergeTree tables",
							   qname, engine),
					  pstrdup("Replicated and shared engines, other MergeTree variants (which merge rows away), Distributed tables and views cannot be verified and exchanged as one generation."),
					  NULL);
	return NULL;
}

/*
 * Rules 6-10: what would change the published generation behind dpwin's
 * verification: TTLs, projections, materialized views, computed columns,
 * unfinished mutations.
 */
static DpwinRefusal *
check_blockers(ChClient *client, const TargetFacts *f,
			   const ServerFacts *server, const char *qname)
{
	const char *create_query = dpwin_ch_row_field(f->table_row, TROW_CREATE_QUERY);
	List	   *projections = f->projections;
	List	   *defaults = NIL;
	ListCell   *lc;
	DpwinRefusal *refusal;

	refusal = check_ttl(client, qname, create_query);
	if (refusal != NULL)
		return refusal;

	if (!server->has_projections_table && dpwin_ctq_has_projection_clause(create_query))
		projections = lappend(projections, pstrdup("(declared in the table definition)"));
	if (projections != NIL)
		return refuse(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					  psprintf("ClickHouse target %s has projections", qname),
					  psprintf("Projections: %s.  Parts with projections cannot be attached or verified like plain parts.",
							   names_list(projections)),
					  psprintf("Drop them with ALTER TABLE %s DROP PROJECTION ..., or refresh another table.",
							   qname));

	if (f->mv_readers != NIL || f->mv_writers != NIL)
	{
		StringInfoData detail;

		initStringInfo(&detail);
		if (f->mv_readers != NIL)
			appendStringInfo(&detail, "Materialized views reading from it: %s.  They see only direct inserts, so the rows dpwin publishes would never reach them.",
							 names_list(f->mv_readers));
		if (f->mv_writers != NIL)
			appendStringInfo(&detail, "%sMaterialized views writing into it: %s.  Their rows would be lost by the exchange.",
							 detail.len > 0 ? "  " : "",
							 names_list(f->mv_writers));
		return refuse(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					  psprintf("ClickHouse target %s has dependent materialized views", qname),
					  detail.data, NULL);
	}

	foreach(lc, f->columns)
	{
		TargetColumn *c = (TargetColumn *) lfirst(lc);

		if (c->default_kind[0] != '\0')
			defaults = lappend(defaults,
							   psprintf("%s %s", dpwin_ch_quote_ident(c->name),
										c->default_kind));
	}
	if (defaults != NIL)
		return refuse(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					  psprintf("ClickHouse target %s has DEFAULT, MATERIALIZED, ALIAS or EPHEMERAL columns",
							   qname),
					  psprintf("Columns: %s.  dpwin writes every column from PostgreSQL and verifies the stored values, so no column may be computed by ClickHouse.",
							   names_list(defaults)),
					  NULL);

	if (f->mutations != NIL)
		return refuse(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					  psprintf("ClickHouse target %s has unfinished mutations", qname),
					  psprintf("Mutations: %s.  A mutation still running would change rows after dpwin verified them.",
							   names_list(f->mutations)),
					  pstrdup("Wait until they finish, or cancel them with KILL MUTATION."));
	return NULL;
}

/* Rule 11: the route's columns are the target's, in the target's order. */
static DpwinRefusal *
check_column_names(const DpwinRoute *route, List *columns, const char *qname)
{
	int			ncols = list_length(columns);
	ListCell   *lc;

	if (ncols != route->ncolumns)
	{
		List	   *tnames = NIL;
		List	   *rnames = NIL;

		foreach(lc, columns)
			tnames = lappend(tnames, dpwin_ch_quote_ident(((TargetColumn *) lfirst(lc))->name));
		for (int i = 0; i < route->ncolumns; i++)
			rnames = lappend(rnames, dpwin_ch_quote_ident(route->columns[i]));
		return refuse(ERRCODE_DATATYPE_MISMATCH,
					  psprintf("ClickHouse target %s has %d columns, route \"%s\" has %d",
							   qname, ncols, route->route_name, route->ncolumns),
					  psprintf("Target columns: %s.  Route columns: %s.",
							   names_list(tnames), names_list(rnames)),
					  NULL);
	}
	for (int i = 0; i < ncols; i++)
	{
		TargetColumn *c = (TargetColumn *) list_nth(columns, i);

		if (strcmp(c->name, route->columns[i]) != 0)
			return refuse(ERRCODE_DATATYPE_MISMATCH,
						  psprintf("column %d of ClickHouse target %s is %s, but column %d of route \"%s\" is \"%s\"",
								   i + 1, qname, dpwin_ch_quote_ident(c->name),
								   i + 1, route->route_name, route->columns[i]),
						  pstrdup("The route's columns must name the target's columns in the target's order."),
						  NULL);
	}
	return NULL;
}

/*
 * Rules 12-13: the window column is DateTime64(p <= 6, 'UTC'), optionally
 * Nullable, and every column's type has parity with its PostgreSQL type.
 * Nullability is not part of parity (docs/types.md, "NULLs").  Sets the
 * window column's precision and nullability in info.
 */
static DpwinRefusal *
check_column_types(const DpwinRoute *route, List *columns, const char *qname,
				   DpwinTargetInfo *info)
{
	TargetColumn *wcol = (TargetColumn *) list_nth(columns, route->window_index);
	char	   *tz;

	if (!parse_window_type(wcol->type, &info->window_precision,
						   &info->window_nullable, &tz) ||
		tz == NULL || strcmp(tz, "UTC") != 0 || info->window_precision > 6)
		return refuse(ERRCODE_DATATYPE_MISMATCH,
					  psprintf("window column %s of ClickHouse target %s has type %s",
							   dpwin_ch_quote_ident(wcol->name), qname, wcol->type),
					  pstrdup("The window column must be DateTime64(p, 'UTC') or Nullable(DateTime64(p, 'UTC')) with p <= 6, so that every PostgreSQL timestamptz is stored exactly and compares in UTC."),
					  NULL);
	for (int i = 0; i < list_length(columns); i++)
	{
		TargetColumn *c = (TargetColumn *) list_nth(columns, i);
		char	   *why = dpwin_ch_type_parity(route->column_types[i],
											   route->column_typmods[i], c->type);

		if (why != NULL)
			return refuse(ERRCODE_DATATYPE_MISMATCH,
						  psprintf("column %s of ClickHouse target %s has type %s, which does not match PostgreSQL type %s",
								   dpwin_ch_quote_ident(c->name), qname, c->type,
								   format_type_with_typemod(route->column_types[i],
															route->column_typmods[i])),
						  why, NULL);
	}
	return NULL;
}

/* What admission returns about an admitted target (docs/admission.md). */
static void
fill_target_info(DpwinTargetInfo *info, const char *db, const char *tb,
				 const TargetFacts *f)
{
	int			ncols = list_length(f->columns);
	StringInfoData qcols;

	info->database = pstrdup(db);
	info->table = pstrdup(tb);
	info->uuid = pstrdup(dpwin_ch_row_field(f->table_row, TROW_UUID));
	info->engine_full = pstrdup(dpwin_ch_row_field(f->table_row, TROW_ENGINE_FULL));
	info->partition_key = pstrdup(dpwin_ch_row_field(f->table_row, TROW_PARTITION_KEY));
	info->sorting_key = pstrdup(dpwin_ch_row_field(f->table_row, TROW_SORTING_KEY));
	info->ncolumns = ncols;
	info->column_names = palloc(sizeof(char *) * ncols);
	info->column_types = palloc(sizeof(char *) * ncols);
	initStringInfo(&qcols);
	for (int i = 0; i < ncols; i++)
	{
		TargetColumn *c = (TargetColumn *) list_nth(f->columns, i);

		info->column_names[i] = c->name;
		info->column_types[i] = c->type;
		if (i > 0)
			appendStringInfoString(&qcols, ", ");
		appendStringInfoString(&qcols, dpwin_ch_quote_ident(c->name));
	}
	info->quoted_columns = qcols.data;
	info->schema_fingerprint =
		schema_fingerprint(ncols, info->column_names, info->column_types,
						   info->engine_full,
						   dpwin_ch_row_field(f->table_row, TROW_CREATE_QUERY));
}

/*
 * The first admission on a client asks for the server's facts and the
 * target's at once, on two connections, so that they cost one round trip
 * in sequence: the target's statement starts on the client, reading
 * system.projections as if the server had it, and the server's facts are
 * read meanwhile on a connection of their own.  Rule 1 decides first: a
 * server it refuses refuses the target, whatever the other statement
 * answered.  A server without system.projections answers the target's
 * statement with UNKNOWN_TABLE, and it is asked again without them.
 */
static DpwinRefusal *
admit_first(ChClient *client, const char *db, const char *tb,
			const char *qname, ServerFacts *server, TargetFacts *facts)
{
	ChClient   *side;
	DpwinRefusal *r;

	dpwin_ch_start(client,
				   target_facts_sql(db, tb, true, !client->row_policies_denied),
				   "admit");
	side = dpwin_ch_client_open(client->conf,
								psprintf("%sv-", client->query_id_prefix));
	PG_TRY();
	{
		r = check_server(client, side, server);
	}
	PG_CATCH();
	{
		dpwin_ch_client_close(side);
		dpwin_ch_abandon(client);
		PG_RE_THROW();
	}
	PG_END_TRY();
	dpwin_ch_client_close(side);

	if (r != NULL)
	{
		ChHttpReply reply;

		/* the answer is not needed, but the client must be free again */
		(void) dpwin_ch_finish_status(client, &reply);
		return r;
	}
	read_target_facts(client, db, tb, server, true, qname, facts);
	return NULL;
}

DpwinTargetInfo *
dpwin_admission_try_admit(ChClient *client, const DpwinRoute *route,
						  DpwinRefusal **refusal)
{
	const char *db = route->target_database;
	const char *tb = route->target_table;
	char	   *qname = dpwin_ch_qualified_name(db, tb);
	ServerFacts server;
	TargetFacts facts;
	DpwinTargetInfo *info = palloc0(sizeof(DpwinTargetInfo));
	DpwinRefusal *r;

	/*
	 * 1: is the server new enough for anything below?  One statement for
	 * the facts of rules 2-13, at the same time on a first admission.
	 */
	if (client->server_version == NULL)
		r = admit_first(client, db, tb, qname, &server, &facts);
	else
	{
		r = check_server(client, client, &server);
		if (r == NULL)
			read_target_facts(client, db, tb, &server, false, qname, &facts);
	}
	if (r == NULL)
		r = check_database(db, facts.db_engine, qname);
	if (r == NULL)
		r = check_table(&facts, qname);
	if (r == NULL)
		r = check_blockers(client, &facts, &server, qname);
	if (r == NULL)
		r = check_column_names(route, facts.columns, qname);
	if (r == NULL)
		r = check_column_types(route, facts.columns, qname, info);

	/* 14: row policies last, as they may cost one more round trip. */
	if (r == NULL)
		r = check_row_policies(client, &facts, qname);

	*refusal = r;
	if (r != NULL)
		return NULL;
	fill_target_info(info, db, tb, &facts);
	return info;
}

DpwinTargetInfo *
dpwin_admission_admit(ChClient *client, const DpwinRoute *route)
{
	DpwinRefusal *refusal;
	DpwinTargetInfo *info = dpwin_admission_try_admit(client, route, &refusal);

	if (refusal != NULL)
		dpwin_admission_raise(refusal);
	return info;
}

DpwinRefusal *
dpwin_admission_check_unchanged(const DpwinTargetInfo *now, const char *uuid,
								const char *schema_fingerprint, const char *when)
{
	char	   *qtarget = dpwin_ch_qualified_name(now->database, now->table);

	if (uuid != NULL && strcmp(now->uuid, uuid) != 0)
		return refuse(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					  psprintf("target %s was replaced %s", qtarget, when),
					  psprintf("Its UUID was %s and is now %s.", uuid, now->uuid),
					  pstrdup("dpwin refuses to publish over a table it did not prepare; start a new invocation."));
	if (schema_fingerprint != NULL &&
		strcmp(now->schema_fingerprint, schema_fingerprint) != 0)
		return refuse(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					  psprintf("the schema of target %s changed %s", qtarget, when),
					  NULL,
					  pstrdup("dpwin refuses to publish a generation with a stale schema; start a new invocation."));
	return NULL;
}

/* "`a` Int64, `w` DateTime64(6, 'UTC'), ..." of a table's description. */
static char *
columns_text(const DpwinTargetInfo *info)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < info->ncolumns; i++)
		appendStringInfo(&buf, "%s%s %s", i > 0 ? ", " : "",
						 dpwin_ch_quote_ident(info->column_names[i]),
						 info->column_types[i]);
	return buf.data;
}

DpwinRefusal *
dpwin_admission_check_like_target(const DpwinTargetInfo *target,
								  const DpwinTargetInfo *other, const char *what)
{
	char	   *qtarget = dpwin_ch_qualified_name(target->database, target->table);
	char	   *qother = dpwin_ch_qualified_name(other->database, other->table);
	bool		same = target->ncolumns == other->ncolumns;

	for (int i = 0; same && i < target->ncolumns; i++)
		same = strcmp(target->column_names[i], other->column_names[i]) == 0 &&
			strcmp(target->column_types[i], other->column_types[i]) == 0;
	if (!same)
		return refuse(ERRCODE_DATATYPE_MISMATCH,
					  psprintf("%s %s does not have the columns of target %s",
							   what, qother, qtarget),
					  psprintf("Its columns are %s; the target's are %s.",
							   columns_text(other), columns_text(target)),
					  NULL);
	if (strcmp(target->partition_key, other->partition_key) != 0 ||
		strcmp(target->sorting_key, other->sorting_key) != 0)
		return refuse(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					  psprintf("%s %s does not have the partition and sorting keys of target %s",
							   what, qother, qtarget),
					  psprintf("Its PARTITION BY is (%s) and its ORDER BY (%s); the target's are (%s) and (%s).",
							   other->partition_key, other->sorting_key,
							   target->partition_key, target->sorting_key),
					  NULL);
	if (strcmp(target->engine_full, other->engine_full) != 0)
		return refuse(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					  psprintf("%s %s does not have the engine of target %s",
							   what, qother, qtarget),
					  psprintf("Its engine is %s; the target's is %s.",
							   other->engine_full, target->engine_full),
					  NULL);
	if (strcmp(target->schema_fingerprint, other->schema_fingerprint) != 0)
		return refuse(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					  psprintf("%s %s is not defined as target %s is", what, qother, qtarget),
					  pstrdup("Their columns, types and engine are the same; their indices, constraints, codecs or comments differ."),
					  NULL);
	return NULL;
}


/* ----------------------------------------------------------------------
 * Before the EXCHANGE probe
 * ----------------------------------------------------------------------
 */

/* The UUID admission last read of the database in this backend, or NULL. */
static const char *
seen_database_uuid(ChClient *client, const char *database)
{
	ListCell   *lc;

	foreach(lc, seen_databases)
	{
		SeenDatabase *d = lfirst(lc);

		if (strcmp(d->server_name, client->conf->server_name) == 0 &&
			strcmp(d->database, database) == 0)
			return d->uuid;
	}
	return NULL;
}

void
dpwin_admission_probe_exchange(ChClient *client, const char *database,
							   const char *name_prefix, bool admitted)
{
	const char *uuid = admitted ? seen_database_uuid(client, database) : NULL;

	/* the same refusals as admission, before anything is created */
	if (uuid == NULL)
	{
		ServerFacts facts;
		DpwinRefusal *refusal;
		List	   *rows;
		List	   *row;

		refusal = check_server(client, client, &facts);
		if (refusal != NULL)
			dpwin_admission_raise(refusal);
		rows = dpwin_ch_parse_tsv(dpwin_ch_exec(client,
												psprintf("SELECT engine, toString(uuid) FROM system.databases WHERE name = %s",
														 dpwin_ch_quote_literal(database))));
		row = rows != NIL ? (List *) linitial(rows) : NIL;
		refusal = check_database(database,
								 row != NIL ? dpwin_ch_row_field(row, 0) : NULL,
								 NULL);
		if (refusal != NULL)
			dpwin_admission_raise(refusal);
		uuid = dpwin_ch_row_field(row, 1);
	}
	dpwin_exchange_probe(client, database, uuid, name_prefix);
}
