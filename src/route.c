/*-------------------------------------------------------------------------
 *
 * route.c
 *	  The route catalog: dpwin.create_route, alter_route and drop_route,
 *	  route loading for the coordinator, route permissions and the config
 *	  fingerprint.
 *
 *	  A route is validated completely before it is stored, and again (with
 *	  the stored values merged in) whenever it is altered: every bad value
 *	  has its own SQLSTATE and a message naming it.  The SQL API exposes
 *	  only the fields below; there is deliberately no way to attach custom
 *	  predicates, hooks or other behaviour to a route.
 *
 *	  Catalog rows are read and written through catalog.h, as the
 *	  extension's owner; every privilege check is made as the calling role
 *	  before that switch.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_class.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/rls.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "chtype.h"
#include "digest.h"
#include "fdw.h"
#include "route.h"
#include "version.h"
#include "window.h"

#define ROUTE_NAME_MAX			63
#define TARGET_NAME_MAX			206
#define MIN_ENCODED_BYTES		INT64CONST(65536)
#define MAX_ENCODED_BYTES		INT64CONST(268435456)
#define MAX_BATCH_ROWS			1000000

/* Invocation states after which a route may change or go away. */
#define FINISHED_STATES "'completed', 'failed', 'abandoned', 'snapshot_expired'"

/*
 * A route's definition as given to create/alter_route or as stored: the
 * raw values before resolution against the current catalogs.
 */
typedef struct RouteSpec
{
	int32		route_id;		/* 0 when not stored yet */
	char	   *route_name;
	Oid			source_relid;
	List	   *columns;		/* of char *; NIL = all user columns */
	char	   *window_column;
	char	   *server_name;
	char	   *target_database;
	char	   *target_table;
	Interval   *lookback;
	Interval   *chunk_interval;
	int32		parallelism;
	int32		batch_rows;
	int64		max_encoded_bytes;
	Oid			evidence_function;	/* InvalidOid: none */
	char	   *evidence_missing;	/* stored signature that no longer
									 * resolves */
	Oid			owner;
	char	   *config_fingerprint;
	bool		skip_unchanged;
} RouteSpec;

/* Columns of ROUTE_SELECT's select list. */
#define Anum_route_route_id				1
#define Anum_route_route_name			2
#define Anum_route_source_relid			3
#define Anum_route_columns				4
#define Anum_route_window_column		5
#define Anum_route_server_name			6
#define Anum_route_target_database		7
#define Anum_route_target_table			8
#define Anum_route_lookback				9
#define Anum_route_chunk_interval		10
#define Anum_route_parallelism			11
#define Anum_route_batch_rows			12
#define Anum_route_max_encoded_bytes	13
#define Anum_route_evidence_oid			14	/* NULL: none, or not resolved */
#define Anum_route_owner				15
#define Anum_route_config_fingerprint	16
#define Anum_route_skip_unchanged		17
#define Anum_route_evidence_function	18	/* NULL: none */

/* Column of the RETURNING list of dpwin_create_route()'s INSERT. */
#define Anum_route_returning_route_id	1

/* Columns of unfinished_invocation()'s query (both NOT NULL). */
#define Anum_unfinished_invocation_id	1
#define Anum_unfinished_state			2

#define ROUTE_SELECT \
	"SELECT route_id, route_name, source_relid, columns::pg_catalog.text[], " \
	"window_column::pg_catalog.text, server_name::pg_catalog.text, " \
	"target_database, target_table, lookback, chunk_interval, parallelism, " \
	"batch_rows, max_encoded_bytes, " \
	"pg_catalog.to_regprocedure(evidence_function::pg_catalog.text)::pg_catalog.oid, " \
	"owner, config_fingerprint, skip_unchanged, " \
	"evidence_function::pg_catalog.text " \
	"FROM dpwin.route "

/* A NOT NULL text column of SPI result row 0, palloc'd. */
static char *
route_text(int col)
{
	return TextDatumGetCString(dpwin_catalog_not_null(col, "route"));
}

/*
 * Copy the current SPI result row 0 (from ROUTE_SELECT) into spec,
 * allocating in mcxt.
 */
static void
spec_from_spi(RouteSpec *spec, MemoryContext mcxt)
{
	MemoryContext old = MemoryContextSwitchTo(mcxt);
	bool		isnull;
	Datum		d;
	Datum	   *elems;
	bool	   *enulls;
	int			nelems;

	memset(spec, 0, sizeof(*spec));
	spec->route_id = DatumGetInt32(dpwin_catalog_not_null(Anum_route_route_id, "route"));
	spec->route_name = route_text(Anum_route_route_name);
	spec->source_relid = DatumGetObjectId(dpwin_catalog_not_null(Anum_route_source_relid, "route"));

	d = dpwin_catalog_not_null(Anum_route_columns, "route");
	deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &enulls, &nelems);
	for (int i = 0; i < nelems; i++)
		spec->columns = lappend(spec->columns, TextDatumGetCString(elems[i]));

	spec->window_column = route_text(Anum_route_window_column);
	spec->server_name = route_text(Anum_route_server_name);
	spec->target_database = route_text(Anum_route_target_database);
	spec->target_table = route_text(Anum_route_target_table);
	spec->lookback = palloc(sizeof(Interval));
	memcpy(spec->lookback, DatumGetIntervalP(dpwin_catalog_not_null(Anum_route_lookback, "route")),
		   sizeof(Interval));
	spec->chunk_interval = palloc(sizeof(Interval));
	memcpy(spec->chunk_interval,
		   DatumGetIntervalP(dpwin_catalog_not_null(Anum_route_chunk_interval, "route")),
		   sizeof(Interval));
	spec->parallelism = DatumGetInt32(dpwin_catalog_not_null(Anum_route_parallelism, "route"));
	spec->batch_rows = DatumGetInt32(dpwin_catalog_not_null(Anum_route_batch_rows, "route"));
	spec->max_encoded_bytes = DatumGetInt64(dpwin_catalog_not_null(Anum_route_max_encoded_bytes, "route"));
	d = dpwin_catalog_value(0, Anum_route_evidence_oid, &isnull);
	spec->evidence_function = isnull ? InvalidOid : DatumGetObjectId(d);
	spec->owner = DatumGetObjectId(dpwin_catalog_not_null(Anum_route_owner, "route"));
	spec->config_fingerprint = route_text(Anum_route_config_fingerprint);
	spec->skip_unchanged = DatumGetBool(dpwin_catalog_not_null(Anum_route_skip_unchanged, "route"));
	/* the evidence function is stored by signature (docs/design.md, "The catalog") */
	d = dpwin_catalog_value(0, Anum_route_evidence_function, &isnull);
	if (!isnull && !OidIsValid(spec->evidence_function))
		spec->evidence_missing = TextDatumGetCString(d);

	MemoryContextSwitchTo(old);
}

/*
 * Read a stored route by name (route_name != NULL) or id.  With
 * for_update, the row stays locked until the end of the transaction, which
 * also keeps new invocations (whose foreign key takes KEY SHARE on it) out.
 */
static bool
spec_read(const char *route_name, int32 route_id, bool for_update,
		  RouteSpec *spec)
{
	MemoryContext caller = CurrentMemoryContext;
	Oid			argtypes[1];
	Datum		args[1];
	const char *sql;
	bool		found;

	/* every call that reads a route comes here first: nothing is read yet */
	dpwin_check_sql_version();

	if (route_name != NULL)
	{
		argtypes[0] = TEXTOID;
		args[0] = CStringGetTextDatum(route_name);
		sql = for_update ?
			ROUTE_SELECT "WHERE route_name = $1 FOR UPDATE" :
			ROUTE_SELECT "WHERE route_name = $1";
	}
	else
	{
		argtypes[0] = INT4OID;
		args[0] = Int32GetDatum(route_id);
		sql = for_update ?
			ROUTE_SELECT "WHERE route_id = $1 FOR UPDATE" :
			ROUTE_SELECT "WHERE route_id = $1";
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	found = dpwin_catalog_exec(sql, 1, argtypes, args, NULL, !for_update) > 0;
	if (found)
		spec_from_spi(spec, caller);
	SPI_finish();
	return found;
}

static void
route_not_found(const char *route_name)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("route \"%s\" does not exist", route_name)));
}

/*
 * Column names of relid, in attnum order, that a route takes by default.
 */
static List *
all_user_columns(Oid relid)
{
	List	   *result = NIL;
	HeapTuple	reltup;
	int			natts;

	reltup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(reltup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	natts = ((Form_pg_class) GETSTRUCT(reltup))->relnatts;
	ReleaseSysCache(reltup);

	for (int attnum = 1; attnum <= natts; attnum++)
	{
		HeapTuple	tp = SearchSysCache2(ATTNUM, ObjectIdGetDatum(relid),
										 Int16GetDatum(attnum));
		Form_pg_attribute att;

		if (!HeapTupleIsValid(tp))
			continue;
		att = (Form_pg_attribute) GETSTRUCT(tp);
		if (!att->attisdropped)
			result = lappend(result, pstrdup(NameStr(att->attname)));
		ReleaseSysCache(tp);
	}
	return result;
}

/*
 * Check that a source relation still exists and is a table that chunk
 * workers can read; ereports otherwise.  Locks it against concurrent DDL
 * for the rest of the transaction.
 */
static void
check_source(Oid relid, const char *route_name, bool stored)
{
	char		relkind;
	char	   *relname;

	/* keep it from being dropped or altered while we look at it */
	LockRelationOid(relid, AccessShareLock);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
	{
		if (!stored)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("source relation with OID %u does not exist", relid)));
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("source table of route \"%s\" no longer exists", route_name),
				 errhint("Point the route at its new source with dpwin.alter_route(%s, source => ...).",
						 quote_literal_cstr(route_name))));
	}

	relname = get_rel_name(relid);
	relkind = get_rel_relkind(relid);
	if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE)
	{
		const char *what;

		switch (relkind)
		{
			case RELKIND_VIEW:
				what = "a view";
				break;
			case RELKIND_MATVIEW:
				what = "a materialized view";
				break;
			case RELKIND_FOREIGN_TABLE:
				what = "a foreign table";
				break;
			case RELKIND_SEQUENCE:
				what = "a sequence";
				break;
			case RELKIND_INDEX:
			case RELKIND_PARTITIONED_INDEX:
				what = "an index";
				break;
			default:
				what = "not a table";
				break;
		}
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("source \"%s\" is %s", relname, what),
				 errdetail("A route reads an ordinary or a partitioned table.")));
	}

	if (get_rel_persistence(relid) == RELPERSISTENCE_TEMP)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("source \"%s\" is a temporary table", relname),
				 errdetail("Chunk workers cannot read a session's temporary tables, and a route outlives the session.")));
}

/* Is userid allowed to read every listed column of relid? */
static bool
can_select_columns(Oid relid, const DpwinRoute *r, Oid userid,
				   const char **denied)
{
	if (pg_class_aclcheck(relid, userid, ACL_SELECT) == ACLCHECK_OK)
		return true;
	for (int i = 0; i < r->ncolumns; i++)
	{
		AttrNumber	attnum = get_attnum(relid, r->columns[i]);

		if (attnum == InvalidAttrNumber ||
			pg_attribute_aclcheck(relid, attnum, userid, ACL_SELECT) != ACLCHECK_OK)
		{
			*denied = r->columns[i];
			return false;
		}
	}
	return true;
}

/*
 * Resolve one column of the route against the source.  validate adds the
 * checks that create/alter_route make; loading only needs the type.
 */
static void
resolve_column(DpwinRoute *r, int i, const char *name, bool validate)
{
	HeapTuple	tp;
	Form_pg_attribute att;

	tp = SearchSysCacheAttName(r->source_relid, name);
	if (!HeapTupleIsValid(tp))
	{
		if (validate)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("column \"%s\" of source \"%s\" does not exist",
							name, r->source_table)));
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of route \"%s\" no longer exists in its source \"%s\"",
						name, r->route_name, r->source_table),
				 errhint("Adjust the route's columns with dpwin.alter_route(%s, columns => ...).",
						 quote_literal_cstr(r->route_name))));
	}
	att = (Form_pg_attribute) GETSTRUCT(tp);

	if (validate && att->attnum <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_COLUMN_REFERENCE),
				 errmsg("column \"%s\" is a system column", name),
				 errdetail("A route copies user columns only.")));
	if (validate && att->attgenerated != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_COLUMN_REFERENCE),
				 errmsg("column \"%s\" of source \"%s\" is a generated column",
						name, r->source_table),
				 errhint("List the route's columns explicitly without it.")));

	r->columns[i] = pstrdup(NameStr(att->attname));
	r->column_types[i] = att->atttypid;
	r->column_typmods[i] = att->atttypmod;
	r->column_notnull[i] = att->attnotnull;
	ReleaseSysCache(tp);

	if (validate && !dpwin_ch_type_supported(r->column_types[i]))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("column \"%s\" has type %s, which dpwin cannot copy",
						name, format_type_with_typemod(r->column_types[i],
													   r->column_typmods[i])),
				 errhint("See docs/types.md for the supported types; leave the column out with columns => ....")));
}

static void
check_target_name(const char *what, const char *value, int len)
{
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("%s must not be empty", what)));
	if (memchr(value, '\0', len) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("%s must not contain a NUL byte", what)));
	if (len > TARGET_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("%s \"%s\" is %d bytes long, more than %d",
						what, value, len, TARGET_NAME_MAX),
				 errdetail("dpwin derives staging, generation and backup table names from it.")));
}

static bool
route_name_char(char c, bool first)
{
	/* ASCII only, whatever the locale's idea of a letter */
	if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_')
		return true;
	if (first)
		return false;
	return (c >= '0' && c <= '9') || c == '$' || c == '.' || c == '-';
}

static void
check_route_name(const char *name)
{
	size_t		len = strlen(name);
	bool		ok = len >= 1 && len <= ROUTE_NAME_MAX;

	for (size_t i = 0; ok && i < len; i++)
		ok = route_name_char(name[i], i == 0);
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid route name \"%s\"", name),
				 errdetail("A route name is 1 to %d characters: an ASCII letter or underscore, then letters, digits, \"_\", \"$\", \".\" or \"-\".",
						   ROUTE_NAME_MAX)));
}

static void
check_evidence_function(Oid fn, Oid userid)
{
	HeapTuple	tp;
	Form_pg_proc proc;
	char	   *fname = format_procedure(fn);

	tp = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	if (!HeapTupleIsValid(tp))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("evidence function with OID %u does not exist", fn)));
	proc = (Form_pg_proc) GETSTRUCT(tp);

	if (proc->prokind != PROKIND_FUNCTION || proc->proretset)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("evidence function %s must be a plain function returning one value",
						fname),
				 errdetail("Procedures, aggregates, window functions and set-returning functions cannot be evidence functions.")));
	if (proc->pronargs != 2 ||
		proc->proargtypes.values[0] != UUIDOID ||
		proc->proargtypes.values[1] != JSONBOID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("evidence function %s must take (uuid, jsonb)", fname),
				 errhint("dpwin calls it with the invocation id and the evidence metrics; it should return void.")));
	ReleaseSysCache(tp);

	if (object_aclcheck(ProcedureRelationId, fn, userid, ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for evidence function %s", fname)));
}

/*
 * The window column must exist in the source and be a timestamptz (or a
 * domain over it).
 */
static void
check_window_column(const RouteSpec *spec, const DpwinRoute *r)
{
	HeapTuple	wtp;

	wtp = SearchSysCacheAttName(spec->source_relid, spec->window_column);
	if (!HeapTupleIsValid(wtp))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("window column \"%s\" of source \"%s\" does not exist",
						spec->window_column, r->source_table)));
	/* a domain over timestamptz reads and encodes like timestamptz */
	if (getBaseType(((Form_pg_attribute) GETSTRUCT(wtp))->atttypid) != TIMESTAMPTZOID)
	{
		Oid			wtype = ((Form_pg_attribute) GETSTRUCT(wtp))->atttypid;

		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("window column \"%s\" has type %s, not timestamp with time zone",
						spec->window_column, format_type_be(wtype)),
				 wtype == TIMESTAMPOID ?
				 errhint("A timestamp without time zone has no defined instant; convert the column with ALTER TABLE ... ALTER COLUMN %s TYPE timestamptz USING %s AT TIME ZONE 'UTC' (or the zone its values are in).",
						 quote_identifier(spec->window_column),
						 quote_identifier(spec->window_column)) :
				 errhint("The window column must be of type timestamptz.")));
	}
	ReleaseSysCache(wtp);
}

/*
 * Resolve the route's columns (all user columns when none are listed) and
 * find the window column among them.
 */
static void
resolve_columns(DpwinRoute *r, const RouteSpec *spec, bool validate)
{
	List	   *colnames;
	ListCell   *lc;
	int			i;

	colnames = spec->columns != NIL ? spec->columns :
		all_user_columns(spec->source_relid);
	r->ncolumns = list_length(colnames);
	if (r->ncolumns > MaxHeapAttributeNumber)
		ereport(ERROR,
				(errcode(ERRCODE_TOO_MANY_COLUMNS),
				 errmsg("a route can have at most %d columns", MaxHeapAttributeNumber)));
	r->columns = palloc0(sizeof(char *) * r->ncolumns);
	r->column_types = palloc0(sizeof(Oid) * r->ncolumns);
	r->column_typmods = palloc0(sizeof(int32) * r->ncolumns);
	r->column_notnull = palloc0(sizeof(bool) * r->ncolumns);
	r->window_index = -1;
	i = 0;
	foreach(lc, colnames)
	{
		const char *name = lfirst(lc);

		if (validate)
		{
			for (int j = 0; j < i; j++)
				if (strcmp(r->columns[j], name) == 0)
					ereport(ERROR,
							(errcode(ERRCODE_DUPLICATE_COLUMN),
							 errmsg("column \"%s\" is listed more than once", name)));
		}
		resolve_column(r, i, name, validate);
		if (strcmp(r->columns[i], spec->window_column) == 0)
			r->window_index = i;
		i++;
	}
	if (r->window_index < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_COLUMN_REFERENCE),
				 errmsg("columns must include the window column \"%s\"",
						spec->window_column)));
	r->window_column = pstrdup(r->columns[r->window_index]);
}

/*
 * userid must be able to read every column of the route, and no row-level
 * security may hide rows from it.
 */
static void
check_source_access(const DpwinRoute *r, Oid userid)
{
	const char *denied = NULL;

	if (!can_select_columns(r->source_relid, r, userid, &denied))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to read column \"%s\" of source \"%s\"",
						denied, r->source_table),
				 errhint("A route's owner needs SELECT on the source table or on each of its columns.")));
	if (check_enable_rls(r->source_relid, userid, true) == RLS_ENABLED)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("row-level security applies to source \"%s\"",
						r->source_table),
				 errdetail("A refresh that sees only some rows would delete the others from the target window.")));
}

/* The server must be a dpwin server that userid may use. */
static void
check_server_usage(const char *server_name, Oid userid)
{
	Oid			serverid = dpwin_server_check(server_name);

	if (object_aclcheck(ForeignServerRelationId, serverid, userid, ACL_USAGE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for server \"%s\"", server_name),
				 errhint("GRANT USAGE ON FOREIGN SERVER %s TO the route's owner.",
						 quote_identifier(server_name))));
}

/*
 * Convert lookback and chunk_interval; with validate, a chunk may not be
 * longer than the window nor cut it into too many chunks.
 */
static void
resolve_durations(DpwinRoute *r, const RouteSpec *spec, bool validate)
{
	int64		nchunks;

	r->lookback_us = dpwin_duration_usecs(spec->lookback, "lookback");
	r->chunk_us = dpwin_duration_usecs(spec->chunk_interval, "chunk_interval");
	if (!validate)
		return;

	if (r->chunk_us > r->lookback_us)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("chunk_interval \"%s\" is longer than lookback \"%s\"",
						dpwin_interval_text(spec->chunk_interval),
						dpwin_interval_text(spec->lookback))));
	nchunks = dpwin_window_nchunks(r->lookback_us, r->chunk_us);
	if (nchunks > DPWIN_MAX_CHUNKS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("chunk_interval \"%s\" cuts lookback \"%s\" into " INT64_FORMAT " chunks, more than %d",
						dpwin_interval_text(spec->chunk_interval),
						dpwin_interval_text(spec->lookback), nchunks,
						DPWIN_MAX_CHUNKS),
				 errhint("Use a longer chunk interval.")));
}

/* parallelism, batch_rows and max_encoded_bytes must be in range. */
static void
check_limits(const RouteSpec *spec)
{
	if (spec->parallelism < 1 || spec->parallelism > DPWIN_MAX_PARALLELISM)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("parallelism %d is out of range", spec->parallelism),
				 errdetail("parallelism is 1 to %d.", DPWIN_MAX_PARALLELISM)));
	if (spec->batch_rows < 1 || spec->batch_rows > MAX_BATCH_ROWS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch_rows %d is out of range", spec->batch_rows),
				 errdetail("batch_rows is 1 to %d.", MAX_BATCH_ROWS)));
	if (spec->max_encoded_bytes < MIN_ENCODED_BYTES ||
		spec->max_encoded_bytes > MAX_ENCODED_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_encoded_bytes " INT64_FORMAT " is out of range",
						spec->max_encoded_bytes),
				 errdetail("max_encoded_bytes is " INT64_FORMAT " (64 kB) to " INT64_FORMAT " (256 MB).",
						   MIN_ENCODED_BYTES, MAX_ENCODED_BYTES)));
}

/*
 * Turn a spec into a DpwinRoute.  With validate, everything create_route
 * promises is checked, privileges as userid; without, only what loading a
 * stored route needs (the source and columns still exist).
 */
static DpwinRoute *
resolve_spec(const RouteSpec *spec, bool validate, Oid userid)
{
	DpwinRoute *r = palloc0(sizeof(DpwinRoute));

	r->route_id = spec->route_id;
	r->route_name = pstrdup(spec->route_name);
	r->source_relid = spec->source_relid;
	check_source(spec->source_relid, spec->route_name, spec->route_id != 0);
	r->source_schema = get_namespace_name(get_rel_namespace(spec->source_relid));
	r->source_table = get_rel_name(spec->source_relid);

	/* the window column first: its errors are the most likely ones */
	check_window_column(spec, r);
	resolve_columns(r, spec, validate);
	if (validate)
		check_source_access(r, userid);

	r->server_name = pstrdup(spec->server_name);
	if (validate)
		check_server_usage(spec->server_name, userid);

	r->target_database = pstrdup(spec->target_database);
	r->target_table = pstrdup(spec->target_table);
	if (validate)
	{
		check_target_name("target_database", spec->target_database,
						  strlen(spec->target_database));
		check_target_name("target_table", spec->target_table,
						  strlen(spec->target_table));
	}

	resolve_durations(r, spec, validate);

	r->parallelism = spec->parallelism;
	r->batch_rows = spec->batch_rows;
	r->max_encoded_bytes = spec->max_encoded_bytes;
	if (validate)
		check_limits(spec);

	if (spec->evidence_missing != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("evidence function %s of route \"%s\" does not exist",
						spec->evidence_missing, spec->route_name),
				 errhint("Create the function again, or change the route's evidence_function with dpwin.alter_route() ('-' removes it).")));
	r->evidence_function = spec->evidence_function;
	if (validate && OidIsValid(spec->evidence_function))
		check_evidence_function(spec->evidence_function, userid);

	r->owner = spec->owner;
	r->skip_unchanged = spec->skip_unchanged;
	r->config_fingerprint = spec->config_fingerprint ?
		pstrdup(spec->config_fingerprint) : NULL;
	return r;
}

/* key=<length>:<value>\n, so that no value can imitate another field */
static void
fp_field(StringInfo buf, const char *key, const char *value)
{
	appendStringInfo(buf, "%s=%zu:%s\n", key, strlen(value), value);
}

char *
dpwin_route_fingerprint(const DpwinRoute *route)
{
	StringInfoData buf;
	char	   *hex;
	char		num[32];

	initStringInfo(&buf);
	appendStringInfoString(&buf, "dpwin route config v1\n");
	fp_field(&buf, "source_schema", route->source_schema);
	fp_field(&buf, "source_table", route->source_table);
	for (int i = 0; i < route->ncolumns; i++)
	{
		fp_field(&buf, "column", route->columns[i]);
		fp_field(&buf, "type",
				 format_type_extended(route->column_types[i],
									  route->column_typmods[i],
									  FORMAT_TYPE_TYPEMOD_GIVEN |
									  FORMAT_TYPE_FORCE_QUALIFY));
	}
	fp_field(&buf, "window_column", route->window_column);
	fp_field(&buf, "server", route->server_name);
	fp_field(&buf, "target_database", route->target_database);
	fp_field(&buf, "target_table", route->target_table);
	snprintf(num, sizeof(num), INT64_FORMAT, route->lookback_us);
	fp_field(&buf, "lookback_us", num);
	snprintf(num, sizeof(num), INT64_FORMAT, route->chunk_us);
	fp_field(&buf, "chunk_us", num);

	hex = dpwin_sha256_hex(buf.data, buf.len);
	pfree(buf.data);
	return hex;
}

DpwinRoute *
dpwin_route_load(const char *route_name, bool missing_ok)
{
	RouteSpec	spec;

	if (!spec_read(route_name, 0, false, &spec))
	{
		if (missing_ok)
			return NULL;
		route_not_found(route_name);
	}
	return resolve_spec(&spec, false, InvalidOid);
}

Oid
dpwin_route_source_relid(const char *route_name)
{
	RouteSpec	spec;

	if (!spec_read(route_name, 0, false, &spec))
		route_not_found(route_name);
	return spec.source_relid;
}

DpwinRoute *
dpwin_route_load_by_id(int32 route_id)
{
	RouteSpec	spec;

	if (!spec_read(NULL, route_id, false, &spec))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("route with id %d does not exist", route_id)));
	return resolve_spec(&spec, false, InvalidOid);
}

static void
check_owner(Oid owner, const char *route_name, const char *action)
{
	if (!has_privs_of_role(GetUserId(), owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of route \"%s\" to %s it", route_name, action)));
}

void
dpwin_route_check_owner(const DpwinRoute *route, const char *action)
{
	check_owner(route->owner, route->route_name, action);
}

/* Member of dpwin_operator, or superuser. */
static bool
is_operator(Oid userid)
{
	Oid			op = get_role_oid("dpwin_operator", true);

	if (superuser_arg(userid))
		return true;
	return OidIsValid(op) && has_privs_of_role(userid, op);
}

void
dpwin_route_check_can_refresh(const DpwinRoute *route)
{
	Oid			userid = GetUserId();
	const char *denied = NULL;
	Oid			serverid;

	if (!is_operator(userid))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to refresh route \"%s\"", route->route_name),
				 errdetail("Only members of dpwin_operator can refresh routes.")));
	if (!can_select_columns(route->source_relid, route, userid, &denied))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to refresh route \"%s\"", route->route_name),
				 errdetail("No SELECT privilege on column \"%s\" of \"%s\".",
						   denied, route->source_table)));
	if (check_enable_rls(route->source_relid, userid, true) == RLS_ENABLED)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to refresh route \"%s\"", route->route_name),
				 errdetail("Row-level security applies to the caller on \"%s\"; a refresh that sees only some rows would delete the others from the target window.",
						   route->source_table)));
	serverid = dpwin_server_check(route->server_name);
	if (object_aclcheck(ForeignServerRelationId, serverid, userid, ACL_USAGE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to refresh route \"%s\"", route->route_name),
				 errdetail("No USAGE privilege on server \"%s\".", route->server_name)));
	if (OidIsValid(route->evidence_function) &&
		object_aclcheck(ProcedureRelationId, route->evidence_function, userid, ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to refresh route \"%s\"", route->route_name),
				 errdetail("No EXECUTE privilege on its evidence function %s.",
						   format_procedure(route->evidence_function))));
}

/* ---- SQL API ---- */

static void
require_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", name)));
}

/* name[] argument -> List of char *; an empty array is NIL (all columns). */
static List *
columns_arg(Datum d)
{
	ArrayType  *arr = DatumGetArrayTypeP(d);
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	List	   *result = NIL;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("columns must be a one-dimensional array")));
	deconstruct_array(arr, NAMEOID, NAMEDATALEN, false, TYPALIGN_CHAR,
					  &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("columns must not contain NULL")));
		result = lappend(result, pstrdup(NameStr(*DatumGetName(elems[i]))));
	}
	return result;
}

static char *
text_arg(FunctionCallInfo fcinfo, int argno, const char *what)
{
	text	   *t = PG_GETARG_TEXT_PP(argno);

	/* a text value cannot hold NUL, but say so rather than truncate */
	if (memchr(VARDATA_ANY(t), '\0', VARSIZE_ANY_EXHDR(t)) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("%s must not contain a NUL byte", what)));
	return text_to_cstring(t);
}

/* Datum array of a spec in the column order of the INSERT/UPDATE below */
#define SPEC_NARGS 17

static void
spec_to_args(const RouteSpec *spec, const DpwinRoute *r, Oid *types,
			 Datum *args, char *nulls)
{
	Datum	   *cols = palloc(sizeof(Datum) * r->ncolumns);

	for (int i = 0; i < r->ncolumns; i++)
		cols[i] = CStringGetTextDatum(r->columns[i]);

	memset(nulls, ' ', SPEC_NARGS);
	nulls[SPEC_NARGS] = '\0';
	types[0] = TEXTOID;
	args[0] = CStringGetTextDatum(spec->route_name);
	types[1] = OIDOID;
	args[1] = ObjectIdGetDatum(r->source_relid);
	types[2] = TEXTOID;
	args[2] = CStringGetTextDatum(r->source_schema);
	types[3] = TEXTOID;
	args[3] = CStringGetTextDatum(r->source_table);
	types[4] = TEXTARRAYOID;
	args[4] = PointerGetDatum(construct_array(cols, r->ncolumns, TEXTOID, -1,
											  false, TYPALIGN_INT));
	types[5] = TEXTOID;
	args[5] = CStringGetTextDatum(r->window_column);
	types[6] = TEXTOID;
	args[6] = CStringGetTextDatum(r->server_name);
	types[7] = TEXTOID;
	args[7] = CStringGetTextDatum(r->target_database);
	types[8] = TEXTOID;
	args[8] = CStringGetTextDatum(r->target_table);
	types[9] = INTERVALOID;
	args[9] = IntervalPGetDatum(spec->lookback);
	types[10] = INTERVALOID;
	args[10] = IntervalPGetDatum(spec->chunk_interval);
	types[11] = INT4OID;
	args[11] = Int32GetDatum(r->parallelism);
	types[12] = INT4OID;
	args[12] = Int32GetDatum(r->batch_rows);
	types[13] = INT8OID;
	args[13] = Int64GetDatum(r->max_encoded_bytes);

	/*
	 * Stored by signature (a text column), so that a dump and pg_upgrade
	 * carry it: the assignment prints the regprocedure, and the route
	 * functions run with search_path pg_catalog, pg_temp, so what is not in
	 * pg_catalog prints schema-qualified, as the 0.1.0 to 0.2.0 update script
	 * stores it.
	 */
	types[14] = REGPROCEDUREOID;
	args[14] = ObjectIdGetDatum(r->evidence_function);
	if (!OidIsValid(r->evidence_function))
		nulls[14] = 'n';
	types[15] = OIDOID;
	args[15] = ObjectIdGetDatum(r->owner);
	types[16] = TEXTOID;
	args[16] = CStringGetTextDatum(r->config_fingerprint);
}

/*
 * NOTICE naming the route's columns that may hold NULLs (no NOT NULL), the
 * window column aside: rows with a NULL window value are never in a window.
 * Admission lets such a column target a ClickHouse type that is not
 * Nullable, and then a NULL fails the refresh instead of being published
 * (docs/types.md, "NULLs").  create_route does not see the target, so it
 * names every such column.
 */
static void
notice_nullable_columns(const DpwinRoute *r)
{
	StringInfoData names;
	int			n = 0;

	initStringInfo(&names);
	for (int i = 0; i < r->ncolumns; i++)
	{
		if (i == r->window_index || r->column_notnull[i])
			continue;
		appendStringInfo(&names, "%s\"%s\"", n > 0 ? ", " : "", r->columns[i]);
		n++;
	}
	if (n == 0)
		return;
	ereport(NOTICE,
			(errmsg_plural("column %s of route \"%s\" may hold NULLs",
						   "columns %s of route \"%s\" may hold NULLs",
						   n, names.data, r->route_name),
			 errdetail("Where the ClickHouse column is not Nullable (an Array never is), a NULL fails the refresh with SQLSTATE 22004 and nothing is published."),
			 errhint("Declare a column NOT NULL if it never holds NULLs, or make its ClickHouse column Nullable.")));
}

/* Store the skip_unchanged option of a stored route (needs SPI). */
static void
store_skip_unchanged(int32 route_id, bool skip)
{
	Oid			types[2] = {INT4OID, BOOLOID};
	Datum		args[2] = {Int32GetDatum(route_id), BoolGetDatum(skip)};

	dpwin_catalog_exec("UPDATE dpwin.route SET skip_unchanged = $2 WHERE route_id = $1",
					   2, types, args, NULL, false);
}

/*
 * Store the operating options of a stored route (needs SPI): keep_backups
 * (argument 14) and stale_after (argument 15), where given.  The library
 * also serves a catalog whose functions do not have them yet (before
 * ALTER EXTENSION dpwin UPDATE), hence the count of arguments.
 */
static void
store_operating_options(FunctionCallInfo fcinfo, int32 route_id)
{
	Oid			types[2] = {INT4OID, INT4OID};
	Datum		args[2] = {Int32GetDatum(route_id), (Datum) 0};

	if (PG_NARGS() > 14 && !PG_ARGISNULL(14))
	{
		int32		keep = PG_GETARG_INT32(14);

		/* a rollback needs one backup */
		if (keep < 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("keep_backups must be at least 1, not %d", keep),
					 errdetail("dpwin.rollback() puts a kept backup back; the newest one is always kept."),
					 errhint("dpwin.drop_backups(route, 0) drops them all once.")));
		args[1] = Int32GetDatum(keep);
		dpwin_catalog_exec("UPDATE dpwin.route SET keep_backups = $2 WHERE route_id = $1",
						   2, types, args, NULL, false);
	}
	if (PG_NARGS() > 15 && !PG_ARGISNULL(15))
	{
		Interval   *stale = PG_GETARG_INTERVAL_P(15);

		/* a fixed, positive length, as the lookback it defaults to */
		(void) dpwin_duration_usecs(stale, "stale_after");
		types[1] = INTERVALOID;
		args[1] = IntervalPGetDatum(stale);
		dpwin_catalog_exec("UPDATE dpwin.route SET stale_after = $2 WHERE route_id = $1",
						   2, types, args, NULL, false);
	}
}

/*
 * dpwin.create_route(route_name text, source regclass, window_column name,
 *		server name, target_database text, target_table text,
 *		lookback interval, chunk_interval interval, parallelism int,
 *		columns name[], batch_rows int, max_encoded_bytes bigint,
 *		evidence_function regprocedure, skip_unchanged boolean,
 *		keep_backups integer, stale_after interval)
 *		RETURNS integer
 */
PG_FUNCTION_INFO_V1(dpwin_create_route);

Datum
dpwin_create_route(PG_FUNCTION_ARGS)
{
	RouteSpec	spec;
	DpwinRoute *r;
	Oid			types[SPEC_NARGS];
	Datum		args[SPEC_NARGS];
	char		nulls[SPEC_NARGS + 1];
	Oid			argtypes[1] = {TEXTOID};
	Datum		nameargs[1];
	int32		route_id;

	dpwin_check_sql_version();
	if (!is_operator(GetUserId()))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to create a route"),
				 errdetail("Only members of dpwin_operator can create routes.")));

	require_arg(fcinfo, 0, "route_name");
	require_arg(fcinfo, 1, "source");
	require_arg(fcinfo, 2, "window_column");
	require_arg(fcinfo, 3, "server");
	require_arg(fcinfo, 4, "target_database");
	require_arg(fcinfo, 5, "target_table");
	require_arg(fcinfo, 6, "lookback");
	require_arg(fcinfo, 7, "chunk_interval");
	require_arg(fcinfo, 8, "parallelism");
	require_arg(fcinfo, 10, "batch_rows");
	require_arg(fcinfo, 11, "max_encoded_bytes");

	memset(&spec, 0, sizeof(spec));
	spec.route_name = text_arg(fcinfo, 0, "route_name");
	check_route_name(spec.route_name);

	/* a duplicate is the cheapest mistake to report */
	nameargs[0] = CStringGetTextDatum(spec.route_name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (dpwin_catalog_exec("SELECT 1 FROM dpwin.route WHERE route_name = $1",
						   1, argtypes, nameargs, NULL, true) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("route \"%s\" already exists", spec.route_name)));
	SPI_finish();

	spec.source_relid = PG_GETARG_OID(1);
	spec.window_column = pstrdup(NameStr(*PG_GETARG_NAME(2)));
	spec.server_name = pstrdup(NameStr(*PG_GETARG_NAME(3)));
	spec.target_database = text_arg(fcinfo, 4, "target_database");
	spec.target_table = text_arg(fcinfo, 5, "target_table");
	spec.lookback = PG_GETARG_INTERVAL_P(6);
	spec.chunk_interval = PG_GETARG_INTERVAL_P(7);
	spec.parallelism = PG_GETARG_INT32(8);
	spec.columns = PG_ARGISNULL(9) ? NIL : columns_arg(PG_GETARG_DATUM(9));
	spec.batch_rows = PG_GETARG_INT32(10);
	spec.max_encoded_bytes = PG_GETARG_INT64(11);
	spec.evidence_function = PG_ARGISNULL(12) ? InvalidOid : PG_GETARG_OID(12);
	spec.owner = GetUserId();

	r = resolve_spec(&spec, true, GetUserId());
	r->config_fingerprint = dpwin_route_fingerprint(r);

	spec_to_args(&spec, r, types, args, nulls);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	dpwin_catalog_exec("INSERT INTO dpwin.route (route_name, source_relid, "
					   "source_schema, source_table, columns, window_column, "
					   "server_name, target_database, target_table, lookback, "
					   "chunk_interval, parallelism, batch_rows, "
					   "max_encoded_bytes, evidence_function, owner, "
					   "config_fingerprint) VALUES ($1, $2, $3, $4, "
					   "$5::pg_catalog.name[], $6, $7, $8, $9, $10, $11, $12, "
					   "$13, $14, $15, $16, $17) "
					   "RETURNING route_id",
					   SPEC_NARGS, types, args, nulls, false);
	route_id = DatumGetInt32(dpwin_catalog_not_null(Anum_route_returning_route_id, "route"));
	if (PG_NARGS() > 13 && !PG_ARGISNULL(13))
		store_skip_unchanged(route_id, PG_GETARG_BOOL(13));
	store_operating_options(fcinfo, route_id);
	SPI_finish();

	notice_nullable_columns(r);
	PG_RETURN_INT32(route_id);
}

/*
 * The first unfinished invocation of a route, or NULL.  SPI connected.
 */
static char *
unfinished_invocation(int32 route_id, char **state)
{
	Oid			argtypes[1] = {INT4OID};
	Datum		args[1];

	args[0] = Int32GetDatum(route_id);
	if (dpwin_catalog_exec("SELECT invocation_id::pg_catalog.text, state "
						   "FROM dpwin.invocation WHERE route_id = $1 "
						   "AND state NOT IN (" FINISHED_STATES ") "
						   "ORDER BY created_at, invocation_id LIMIT 1",
						   1, argtypes, args, NULL, false) == 0)
		return NULL;
	*state = dpwin_catalog_text(0, Anum_unfinished_state);
	return dpwin_catalog_text(0, Anum_unfinished_invocation_id);
}

/*
 * dpwin.alter_route(route_name text, <every create_route option> DEFAULT
 *		NULL) RETURNS void
 *
 * NULL leaves an option as it is.  The merged definition is validated
 * like a new one, so alter_route(name) alone re-confirms a route whose
 * source changed.  columns => '{}' means all columns again, and
 * evidence_function => '-' removes the evidence function.
 */
PG_FUNCTION_INFO_V1(dpwin_alter_route);

Datum
dpwin_alter_route(PG_FUNCTION_ARGS)
{
	RouteSpec	spec;
	DpwinRoute *r;
	char	   *route_name;
	char	   *fingerprint;
	Oid			types[SPEC_NARGS + 1];
	Datum		args[SPEC_NARGS + 1];
	char		nulls[SPEC_NARGS + 2];
	char	   *inv;
	char	   *state = NULL;

	require_arg(fcinfo, 0, "route_name");
	route_name = text_arg(fcinfo, 0, "route_name");

	if (!spec_read(route_name, 0, true, &spec))
		route_not_found(route_name);
	check_owner(spec.owner, spec.route_name, "alter");

	if (!PG_ARGISNULL(1))
		spec.source_relid = PG_GETARG_OID(1);
	if (!PG_ARGISNULL(2))
		spec.window_column = pstrdup(NameStr(*PG_GETARG_NAME(2)));
	if (!PG_ARGISNULL(3))
		spec.server_name = pstrdup(NameStr(*PG_GETARG_NAME(3)));
	if (!PG_ARGISNULL(4))
		spec.target_database = text_arg(fcinfo, 4, "target_database");
	if (!PG_ARGISNULL(5))
		spec.target_table = text_arg(fcinfo, 5, "target_table");
	if (!PG_ARGISNULL(6))
		spec.lookback = PG_GETARG_INTERVAL_P(6);
	if (!PG_ARGISNULL(7))
		spec.chunk_interval = PG_GETARG_INTERVAL_P(7);
	if (!PG_ARGISNULL(8))
		spec.parallelism = PG_GETARG_INT32(8);
	if (!PG_ARGISNULL(9))
		spec.columns = columns_arg(PG_GETARG_DATUM(9));
	if (!PG_ARGISNULL(10))
		spec.batch_rows = PG_GETARG_INT32(10);
	if (!PG_ARGISNULL(11))
		spec.max_encoded_bytes = PG_GETARG_INT64(11);
	if (!PG_ARGISNULL(12))
	{
		spec.evidence_function = PG_GETARG_OID(12);
		spec.evidence_missing = NULL;
	}

	r = resolve_spec(&spec, true, GetUserId());
	fingerprint = dpwin_route_fingerprint(r);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (strcmp(fingerprint, spec.config_fingerprint) != 0 &&
		(inv = unfinished_invocation(spec.route_id, &state)) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("cannot change the source, columns, window or target of route \"%s\" while invocation %s is unfinished",
						spec.route_name, inv),
				 errdetail("The invocation is in state \"%s\"; its persisted plan must stay valid for recovery.",
						   state),
				 errhint("Let the invocation finish or recover it first; parallelism, batch_rows, max_encoded_bytes, evidence_function and skip_unchanged can be changed now.")));

	r->config_fingerprint = fingerprint;
	spec_to_args(&spec, r, types, args, nulls);
	types[SPEC_NARGS] = INT4OID;
	args[SPEC_NARGS] = Int32GetDatum(spec.route_id);
	nulls[SPEC_NARGS] = ' ';
	nulls[SPEC_NARGS + 1] = '\0';
	dpwin_catalog_exec("UPDATE dpwin.route SET route_name = $1, "
					   "source_relid = $2, source_schema = $3, "
					   "source_table = $4, columns = $5::pg_catalog.name[], "
					   "window_column = $6, server_name = $7, "
					   "target_database = $8, target_table = $9, "
					   "lookback = $10, chunk_interval = $11, "
					   "parallelism = $12, batch_rows = $13, "
					   "max_encoded_bytes = $14, "
					   "evidence_function = $15, "
					   "owner = $16, config_fingerprint = $17, "
					   "updated_at = pg_catalog.now() WHERE route_id = $18",
					   SPEC_NARGS + 1, types, args, nulls, false);
	if (PG_NARGS() > 13 && !PG_ARGISNULL(13))
		store_skip_unchanged(spec.route_id, PG_GETARG_BOOL(13));
	store_operating_options(fcinfo, spec.route_id);
	SPI_finish();

	PG_RETURN_VOID();
}

/*
 * dpwin.drop_route(route_name text) RETURNS void
 *
 * Removes the route together with its finished history: invocations and,
 * through them, chunks, publications and evidence, and its route state.
 * Refused while any invocation is unfinished.  Leases belong to targets,
 * which other routes may share, and stay.
 */
PG_FUNCTION_INFO_V1(dpwin_drop_route);

Datum
dpwin_drop_route(PG_FUNCTION_ARGS)
{
	RouteSpec	spec;
	char	   *route_name;
	char	   *inv;
	char	   *state = NULL;
	Oid			argtypes[1] = {INT4OID};
	Datum		args[1];

	require_arg(fcinfo, 0, "route_name");
	route_name = text_arg(fcinfo, 0, "route_name");

	if (!spec_read(route_name, 0, true, &spec))
		route_not_found(route_name);
	check_owner(spec.owner, spec.route_name, "drop");

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	inv = unfinished_invocation(spec.route_id, &state);
	if (inv != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("cannot drop route \"%s\" while invocation %s is unfinished",
						spec.route_name, inv),
				 errdetail("The invocation is in state \"%s\".", state),
				 errhint("Let the invocation finish or recover it first.")));

	args[0] = Int32GetDatum(spec.route_id);
	dpwin_catalog_exec("DELETE FROM dpwin.route_state WHERE route_id = $1",
					   1, argtypes, args, NULL, false);
	dpwin_catalog_exec("DELETE FROM dpwin.evidence WHERE route_id = $1",
					   1, argtypes, args, NULL, false);
	/* chunks and publications go with their invocation (ON DELETE CASCADE) */
	dpwin_catalog_exec("DELETE FROM dpwin.invocation WHERE route_id = $1",
					   1, argtypes, args, NULL, false);
	dpwin_catalog_exec("DELETE FROM dpwin.route WHERE route_id = $1",
					   1, argtypes, args, NULL, false);
	SPI_finish();

	PG_RETURN_VOID();
}
