/*-------------------------------------------------------------------------
 *
 * version.c
 *	  The versions of the extension's SQL objects that this library
 *	  supports.
 *
 *	  A package upgrade replaces dpwin.so at once, while each database keeps
 *	  the catalog of the version it last installed or updated to until its
 *	  DBA runs ALTER EXTENSION dpwin UPDATE.  The library reads and writes
 *	  that catalog with SQL written for its own version, so every call
 *	  checks the installed version first and refuses a version it was not
 *	  built for, before any I/O, rather than failing half-way on a column
 *	  of another type (docs/design.md, "The catalog").
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/pg_extension.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"

#include "version.h"

/* extversion values whose catalog this library's SQL matches */
static const char *const supported_versions[] = {"0.2.0"};

/* The installed extversion of dpwin in this database, NULL if none. */
static char *
installed_version(void)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	char	   *version = NULL;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("dpwin"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = TextDatumGetCString(d);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

void
dpwin_check_sql_version(void)
{
	char	   *version = installed_version();

	if (version == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"dpwin\" is not installed in this database"),
				 errhint("Run CREATE EXTENSION dpwin.")));
	for (size_t i = 0; i < lengthof(supported_versions); i++)
		if (strcmp(version, supported_versions[i]) == 0)
			return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("extension \"dpwin\" is at version %s, which this library does not support",
					version),
			 errdetail("The installed library works with the SQL objects of version %s.",
					   supported_versions[lengthof(supported_versions) - 1]),
			 errhint("Run ALTER EXTENSION dpwin UPDATE.")));
}
