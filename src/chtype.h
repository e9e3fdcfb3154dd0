/*-------------------------------------------------------------------------
 *
 * chtype.h
 *	  ClickHouse type expressions, parsed, and their parity with PostgreSQL
 *	  types, which chtype.c owns.  dpwin_ch_type_parity() is the entry
 *	  point of the parity rules.
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
extern Oid	dpwin_ch_type_resolve_pg(Oid typid, int32 *typmod, Oid *elem);

/*
 * Parity of a resolved PostgreSQL type against a parsed ClickHouse type
 * (NULL when it holds, else a sentence saying why not).  Nullability is
 * not part of it: the encoder checks each NULL.
 */
extern char *dpwin_ch_type_parity_resolved(Oid base, Oid elem, int32 typmod,
										   const ChType *t);

/*
 * Can a PostgreSQL column (typid, typmod) be encoded as the ClickHouse type
 * ch_type (as system.columns.type prints it, e.g. "Nullable(Decimal(18, 2))",
 * "DateTime64(6, 'UTC')", "Array(Nullable(Int32))")?  Returns NULL when it
 * can, else a palloc'd sentence saying why not.  Whether the column may
 * hold NULLs does not matter: a NULL for a type that is not Nullable is
 * refused value by value by dpwin_rb_encode_row() (docs/types.md).
 */
extern PGDLLEXPORT char *dpwin_ch_type_parity(Oid typid, int32 typmod,
											  const char *ch_type);

/* Is this PostgreSQL type supported at all (docs/types.md)? */
extern bool dpwin_ch_type_supported(Oid typid);

#endif							/* DPWIN_CHTYPE_H */
