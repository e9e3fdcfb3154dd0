/*-------------------------------------------------------------------------
 *
 * chtype.h
 *	  ClickHouse type expressions, parsed, and their parity with PostgreSQL
 *	  types (chtype.c).  dpwin_rb_type_parity(), the entry point
 *	  of the parity rules, is declared in rowbinary.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_CHTYPE_H
#define DPWIN_CHTYPE_H

typedef enum ChKind
{
	CH_INT,						/* Int8 .. Int256 (bytes) */
	CH_UINT,					/* UInt8 .. UInt256 (bytes) */
	CH_FLOAT32,
	CH_FLOAT64,
	CH_DECIMAL,					/* precision, scale; bytes 4/8/16/32 */
	CH_BOOL,
	CH_STRING,
	CH_DATE,					/* UInt16 days since 1970-01-01 */
	CH_DATE32,					/* Int32 days since 1970-01-01 */
	CH_DATETIME64,				/* precision, tz */
	CH_UUID,
	CH_ARRAY,					/* elem */
	CH_OTHER					/* parsed, but nothing maps to it */
} ChKind;

typedef struct ChType
{
	ChKind		kind;
	bool		nullable;		/* Nullable(...), possibly inside
								 * LowCardinality */
	int			bytes;			/* storage width of ints and decimals */
	int			precision;		/* Decimal P, DateTime64 p */
	int			scale;			/* Decimal S */
	char	   *tz;				/* DateTime64 timezone, NULL when absent */
	struct ChType *elem;		/* Array element */
	char	   *text;			/* canonical spelling without Nullable */
} ChType;

/* Parse a type as system.columns.type prints it; NULL and *error on failure. */
extern ChType *dpwin_ch_type_parse(const char *type_text, char **error);

/*
 * Resolve domains to their base type.  For an array type, *elem is set to
 * the resolved element type (InvalidOid otherwise).
 */
extern Oid	dpwin_pg_resolve_type(Oid typid, int32 *typmod, Oid *elem);

/*
 * Parity of a resolved PostgreSQL type against a parsed ClickHouse type
 * (NULL when it holds, else a sentence saying why not).  Nullability is
 * not part of it: the encoder checks each NULL.
 */
extern char *dpwin_parity_resolved(Oid base, Oid elem, int32 typmod,
								   const ChType *t);

#endif							/* DPWIN_CHTYPE_H */
