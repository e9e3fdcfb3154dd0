/*-------------------------------------------------------------------------
 *
 * rowbinary.h
 *	  PostgreSQL Datum -> ClickHouse RowBinary encoders, which rowbinary.c
 *	  owns, with fidelity checks: a value that cannot be represented
 *	  exactly is an error, never a rounded number.  The type parity rules
 *	  are chtype.h's.
 *
 *	  No I/O.  See docs/types.md for the map.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_ROWBINARY_H
#define DPWIN_ROWBINARY_H

#include "lib/stringinfo.h"

typedef struct RbEncoder RbEncoder;

/*
 * Build an encoder for ncols columns.  names are the column names (for
 * error messages); window_index is the column whose value names a row in
 * fidelity errors.  pg_notnull (which columns are NOT NULL in PostgreSQL)
 * is ignored: every NULL is checked when it is met, whatever the column's
 * constraint.  ereports ERRCODE_DATATYPE_MISMATCH if any column fails
 * dpwin_ch_type_parity() (chtype.h).  Allocated in CurrentMemoryContext.
 */
extern PGDLLEXPORT RbEncoder *dpwin_rb_encoder_create(int ncols, char *const *names,
													  const Oid *typids, const int32 *typmods,
													  const bool *pg_notnull,
													  char *const *ch_types, int window_index);

/*
 * Append the RowBinary encoding of one row to out.  Values are Datums of
 * the columns' PostgreSQL types.  A value that does not fit the ClickHouse
 * type exactly ereports, naming the column, the value and (errdetail) the
 * row's window value in UTC:
 *	 ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE	 numeric too large or too precise for
 *										 Decimal(P, S), numeric +-Infinity
 *	 ERRCODE_DATETIME_VALUE_OUT_OF_RANGE date/timestamp +-infinity, outside
 *										 1900-01-01 .. 2299-12-31 (Date:
 *										 1970-01-01 .. 2149-06-06), or with
 *										 digits below DateTime64's 10^-p s
 *	 ERRCODE_INVALID_PARAMETER_VALUE	 numeric NaN, multi-dimensional array
 *	 ERRCODE_NULL_VALUE_NOT_ALLOWED		 NULL (or NULL array element) for a
 *										 type that is not Nullable: the
 *										 message names the column, the
 *										 detail the row's window value
 * Nothing is ever rounded.  Allocates nothing per value except for toasted
 * or compressed values (freed again) and jsonb.  The row is appended; on
 * error, out may hold a partial row.
 */
extern PGDLLEXPORT void dpwin_rb_encode_row(RbEncoder *enc, const Datum *values,
											const bool *isnull, StringInfo out);

#endif							/* DPWIN_ROWBINARY_H */
