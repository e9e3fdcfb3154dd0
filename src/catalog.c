/*-------------------------------------------------------------------------
 *
 * catalog.c
 *	  SPI access to dpwin's tables as the extension's owner.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "catalog/namespace.h"
#include "catalog/pg_namespace.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/syscache.h"

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
