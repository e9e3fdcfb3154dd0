/*-------------------------------------------------------------------------
 *
 * catalog.h
 *	  Access to dpwin's own tables through SPI, as the extension's owner.
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

#include "executor/spi.h"


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

#endif							/* DPWIN_CATALOG_H */
