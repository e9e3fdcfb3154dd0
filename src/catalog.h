/*-------------------------------------------------------------------------
 *
 * catalog.h
 *	  Access to dpwin's own tables through SPI, as the extension's owner,
 *	  and typed reads of the rows it returns (catalog.c).
 *
 *	  Ordinary roles cannot write the catalog; the functions that must
 *	  write it switch to the owner of schema dpwin for the duration of one
 *	  statement, with a fixed search_path, the way SECURITY DEFINER
 *	  functions do.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_CATALOG_H
#define DPWIN_CATALOG_H

#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "utils/uuid.h"


/*
 * Run one statement as the catalog owner.  args are Datums of argtypes,
 * nulls a " "/"n" string as for SPI_execute_with_args (NULL: none null).
 * Returns SPI_processed; the result tuples stay in SPI_tuptable until the
 * next call.  The caller must have done SPI_connect().
 */
extern uint64 dpwin_catalog_exec(const char *sql, int nargs, Oid *argtypes,
								 Datum *args, const char *nulls,
								 bool read_only);

/* Value of column `col` (1-based) of result row `row`, with its null flag. */
extern Datum dpwin_catalog_value(uint64 row, int col, bool *isnull);

/*
 * Value of NOT NULL column `col` of result row 0 of a statement over
 * dpwin.`table`: a null one is a corrupt catalog (elog).
 */
extern Datum dpwin_catalog_not_null(int col, const char *table);
extern char *dpwin_catalog_text(uint64 row, int col);	/* NULL if null */

/*
 * Typed getters of the columns of the last catalog query's rows, by the
 * Anum_* constants of its select list.  A NOT NULL column found null is a
 * corrupt catalog: elog.
 */
extern int32 dpwin_catalog_int32(uint64 row, int col);
extern int64 dpwin_catalog_int64(uint64 row, int col);
extern int64 dpwin_catalog_int64_or(uint64 row, int col, int64 if_null);
extern Oid	dpwin_catalog_oid(uint64 row, int col);
extern TimestampTz dpwin_catalog_timestamptz(uint64 row, int col);
extern pg_uuid_t *dpwin_catalog_uuid(uint64 row, int col);

/*
 * The one text column of the one row that `sql` selects, in the caller's
 * memory context; NULL when there is no such row, or the value is null.
 */
extern char *dpwin_catalog_one_text(const char *sql, int nargs, Oid *types,
									Datum *args, bool read_only);

/* The same, for a statement whose one parameter $1 is an invocation id. */
extern char *dpwin_catalog_invocation_text(const char *sql, const pg_uuid_t *id,
										   bool read_only);

#endif							/* DPWIN_CATALOG_H */
