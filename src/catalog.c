/*-------------------------------------------------------------------------
 *
 * catalog.c
 *	  SPI access to dpwin's tables as the extension's owner.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "catalog/pg_namespace.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "catalog.h"

static Oid
catalog_owner(void)
{
	HeapTuple	tup;
	Oid			nspid = get_namespace_oid("dpwin", false);
	Oid			owner;

	tup = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(nspid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for namespace %u", nspid);
	owner = ((Form_pg_namespace) GETSTRUCT(tup))->nspowner;
	ReleaseSysCache(tup);
	return owner;
}

uint64
dpwin_catalog_exec(const char *sql, int nargs, Oid *argtypes, Datum *args,
				   const char *nulls, bool read_only)
{
	Oid			saved_uid;
	int			saved_ctx;
	int			save_nestlevel;
	volatile int rc = 0;

	GetUserIdAndSecContext(&saved_uid, &saved_ctx);
	SetUserIdAndSecContext(catalog_owner(),
						   saved_ctx | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	PG_TRY();
	{
		rc = SPI_execute_with_args(sql, nargs, argtypes, args, nulls,
								   read_only, 0);
	}
	PG_FINALLY();
	{
		AtEOXact_GUC(false, save_nestlevel);
		SetUserIdAndSecContext(saved_uid, saved_ctx);
	}
	PG_END_TRY();

	if (rc < 0)
		elog(ERROR, "dpwin catalog statement failed: %s", SPI_result_code_string(rc));
	return SPI_processed;
}

Datum
dpwin_catalog_value(uint64 row, int col, bool *isnull)
{
	Assert(SPI_tuptable != NULL && row < SPI_processed);
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col,
						 isnull);
}

Datum
dpwin_catalog_not_null(int col, const char *table)
{
	bool		isnull;
	Datum		d = dpwin_catalog_value(0, col, &isnull);

	if (isnull)
		elog(ERROR, "dpwin: column %d of a dpwin.%s row is null", col, table);
	return d;
}

char *
dpwin_catalog_text(uint64 row, int col)
{
	Assert(SPI_tuptable != NULL && row < SPI_processed);
	return SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col);
}

/*
 * Typed getters of the columns of the last catalog query's rows, by the
 * Anum_* constants of its select list.  A NOT NULL column found null is a
 * corrupt catalog: elog.
 */
static Datum
catalog_get_not_null(uint64 row, int col)
{
	bool		isnull;
	Datum		d = dpwin_catalog_value(row, col, &isnull);

	if (isnull)
		elog(ERROR, "dpwin: column %d of a catalog row is null", col);
	return d;
}

int32
dpwin_catalog_int32(uint64 row, int col)
{
	return DatumGetInt32(catalog_get_not_null(row, col));
}

int64
dpwin_catalog_int64(uint64 row, int col)
{
	return DatumGetInt64(catalog_get_not_null(row, col));
}

/* A nullable bigint: `if_null` when null. */
int64
dpwin_catalog_int64_or(uint64 row, int col, int64 if_null)
{
	bool		isnull;
	Datum		d = dpwin_catalog_value(row, col, &isnull);

	return isnull ? if_null : DatumGetInt64(d);
}

Oid
dpwin_catalog_oid(uint64 row, int col)
{
	return DatumGetObjectId(catalog_get_not_null(row, col));
}

/* A nullable timestamptz: -infinity when null. */
TimestampTz
dpwin_catalog_timestamptz(uint64 row, int col)
{
	bool		isnull;
	Datum		d = dpwin_catalog_value(row, col, &isnull);

	return isnull ? DT_NOBEGIN : DatumGetTimestampTz(d);
}

pg_uuid_t *
dpwin_catalog_uuid(uint64 row, int col)
{
	return dpwin_uuid_copy(DatumGetUUIDP(catalog_get_not_null(row, col)));
}

/*
 * The one text column of the one row that `sql` selects, in the caller's
 * memory context (SPI leaves its own current); NULL when there is no such
 * row, or the value is null.
 */
char *
dpwin_catalog_one_text(const char *sql, int nargs, Oid *types, Datum *args,
					   bool read_only)
{
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext spicxt;
	char	   *text;

	if (dpwin_catalog_exec(sql, nargs, types, args, NULL, read_only) != 1)
		return NULL;
	spicxt = MemoryContextSwitchTo(caller);
	text = dpwin_catalog_text(0, 1);
	MemoryContextSwitchTo(spicxt);
	return text;
}

/*
 * The one text column of the one row that `sql` selects for invocation
 * $1; NULL when there is none, or it is null.  Not read_only: a new
 * snapshot, which sees what a coordinator has committed meanwhile.
 */
char *
dpwin_catalog_invocation_text(const char *sql, const pg_uuid_t *id,
							  bool read_only)
{
	Oid			types[1] = {UUIDOID};
	Datum		args[1];

	args[0] = UUIDPGetDatum(dpwin_uuid_copy(id));
	return dpwin_catalog_one_text(sql, 1, types, args, read_only);
}
