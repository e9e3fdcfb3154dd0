/*-------------------------------------------------------------------------
 *
 * rowbinary.c
 *	  PostgreSQL Datum -> ClickHouse RowBinary encoders.
 *
 *	  Values are encoded straight from their Datums: no output functions on
 *	  the hot path (jsonb and error messages excepted).  Each column gets an
 *	  encoder function chosen once, when the encoder is created, from the
 *	  PostgreSQL type and the ClickHouse type as system.columns.type prints
 *	  it.  A value that the ClickHouse type cannot hold exactly is an error
 *	  naming the column, the value and the row's window value; nothing is
 *	  ever rounded, clamped or truncated.
 *
 *	  RowBinary is little-endian; see DESIGN.md §4 and docs/types.md.
 *
 *	  No I/O.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/tupmacs.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "lib/stringinfo.h"
#include "nodes/nodeFuncs.h"
#include "port/pg_bswap.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/datetime.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "rowbinary.h"

/* ----------------------------------------------------------------
 * ClickHouse types
 * ----------------------------------------------------------------
 */

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
	bool		nullable;		/* Nullable(...), possibly inside LowCardinality */
	int			bytes;			/* storage width of ints and decimals */
	int			precision;		/* Decimal P, DateTime64 p */
	int			scale;			/* Decimal S */
	char	   *tz;				/* DateTime64 timezone, NULL when absent */
	struct ChType *elem;		/* Array element */
	char	   *text;			/* canonical spelling without Nullable */
} ChType;

/*
 * A parsed ClickHouse type expression: Name or Name(arg, ...) where an
 * argument is a type, an integer or a quoted string.
 */
typedef struct ChArg
{
	enum
	{
		CHARG_TYPE, CHARG_NUMBER, CHARG_STRING
	}			kind;
	struct ChNode *node;
	int64		number;
	char	   *string;
} ChArg;

typedef struct ChNode
{
	char	   *name;
	char	   *text;			/* the whole expression as written */
	int			nargs;
	ChArg	   *args;
} ChNode;

typedef struct ChParser
{
	const char *p;
	const char *start;
	char	   *error;			/* palloc'd sentence on failure */
} ChParser;

/* Representable range of DateTime64 and Date32, 1900-01-01 .. 2299-12-31 */
/* days from 1970-01-01 to 2000-01-01, PostgreSQL's epoch: 10957 */
#define RB_UNIX_EPOCH_JDAYS		((int32) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE))
#define RB_DATE32_MIN_DAYS		(-25567)	/* 1900-01-01 from 1970-01-01 */
#define RB_DATE32_MAX_DAYS		120529	/* 2299-12-31 from 1970-01-01 */
#define RB_DATE_MAX_DAYS		65535	/* 2149-06-06 */
#define RB_USECS_PER_DAY		INT64CONST(86400000000)
#define RB_DT64_MIN_US			((int64) RB_DATE32_MIN_DAYS * RB_USECS_PER_DAY)
#define RB_DT64_MAX_US			((int64) (RB_DATE32_MAX_DAYS + 1) * RB_USECS_PER_DAY - 1)
#define RB_PG_TO_UNIX_US		((int64) RB_UNIX_EPOCH_JDAYS * RB_USECS_PER_DAY)

#define RB_MAX_DECIMAL_PRECISION 76

static const uint64 rb_pow10_u64[20] = {
	UINT64CONST(1), UINT64CONST(10), UINT64CONST(100), UINT64CONST(1000),
	UINT64CONST(10000), UINT64CONST(100000), UINT64CONST(1000000),
	UINT64CONST(10000000), UINT64CONST(100000000), UINT64CONST(1000000000),
	UINT64CONST(10000000000), UINT64CONST(100000000000),
	UINT64CONST(1000000000000), UINT64CONST(10000000000000),
	UINT64CONST(100000000000000), UINT64CONST(1000000000000000),
	UINT64CONST(10000000000000000), UINT64CONST(100000000000000000),
	UINT64CONST(1000000000000000000), UINT64CONST(10000000000000000000)
};

/* ---------- type expression parser ---------- */

static void
chp_skip_space(ChParser *ps)
{
	while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
		ps->p++;
}

static bool
chp_fail(ChParser *ps, const char *what)
{
	if (ps->error == NULL)
		ps->error = psprintf("cannot parse ClickHouse type \"%s\": %s at offset %d",
							 ps->start, what, (int) (ps->p - ps->start));
	return false;
}

static ChNode *chp_node(ChParser *ps, int depth);

static bool
chp_arg(ChParser *ps, ChArg *arg, int depth)
{
	chp_skip_space(ps);

	/*
	 * A quoted string.  Callers sometimes hand over the TabSeparated
	 * spelling of system.columns.type, where quotes come escaped as \';
	 * accept that too.
	 */
	if (*ps->p == '\'' || (ps->p[0] == '\\' && ps->p[1] == '\''))
	{
		StringInfoData s;

		ps->p += (*ps->p == '\\') ? 2 : 1;
		initStringInfo(&s);
		for (;;)
		{
			if (*ps->p == '\0')
				return chp_fail(ps, "unterminated string");
			if (ps->p[0] == '\\' && ps->p[1] == '\'')
			{
				/* escaped quote: the closing one if followed by ) or , */
				const char *q = ps->p + 2;

				while (*q == ' ' || *q == '\t')
					q++;
				if (*q == ')' || *q == ',')
				{
					ps->p += 2;
					break;
				}
				appendStringInfoChar(&s, '\'');
				ps->p += 2;
				continue;
			}
			if (*ps->p == '\\' && ps->p[1] != '\0')
			{
				appendStringInfoChar(&s, ps->p[1]);
				ps->p += 2;
				continue;
			}
			if (*ps->p == '\'')
			{
				ps->p++;
				break;
			}
			appendStringInfoChar(&s, *ps->p);
			ps->p++;
		}
		arg->kind = CHARG_STRING;
		arg->string = s.data;
		return true;
	}
	if ((*ps->p >= '0' && *ps->p <= '9') || *ps->p == '-')
	{
		bool		neg = false;
		int64		v = 0;

		if (*ps->p == '-')
		{
			neg = true;
			ps->p++;
		}
		if (!(*ps->p >= '0' && *ps->p <= '9'))
			return chp_fail(ps, "expected a number");
		while (*ps->p >= '0' && *ps->p <= '9')
		{
			if (v > 100000000)
				return chp_fail(ps, "number too large");
			v = v * 10 + (*ps->p - '0');
			ps->p++;
		}
		arg->kind = CHARG_NUMBER;
		arg->number = neg ? -v : v;
		return true;
	}
	arg->kind = CHARG_TYPE;
	arg->node = chp_node(ps, depth + 1);
	return arg->node != NULL;
}

static ChNode *
chp_node(ChParser *ps, int depth)
{
	ChNode	   *n;
	const char *s;
	const char *end;

	if (depth > 32)
	{
		chp_fail(ps, "nested too deeply");
		return NULL;
	}
	chp_skip_space(ps);
	s = ps->p;
	if (!((*ps->p >= 'A' && *ps->p <= 'Z') || (*ps->p >= 'a' && *ps->p <= 'z') ||
		  *ps->p == '_'))
	{
		chp_fail(ps, "expected a type name");
		return NULL;
	}
	while ((*ps->p >= 'A' && *ps->p <= 'Z') || (*ps->p >= 'a' && *ps->p <= 'z') ||
		   (*ps->p >= '0' && *ps->p <= '9') || *ps->p == '_')
		ps->p++;

	n = palloc0(sizeof(ChNode));
	n->name = pnstrdup(s, ps->p - s);
	end = ps->p;
	chp_skip_space(ps);
	if (*ps->p == '(')
	{
		int			cap = 4;

		ps->p++;
		n->args = palloc0(sizeof(ChArg) * cap);
		chp_skip_space(ps);
		if (*ps->p == ')')
		{
			ps->p++;
			n->text = pnstrdup(s, ps->p - s);
			return n;
		}
		for (;;)
		{
			if (n->nargs == cap)
			{
				cap *= 2;
				n->args = repalloc(n->args, sizeof(ChArg) * cap);
			}
			if (!chp_arg(ps, &n->args[n->nargs], depth))
				return NULL;
			n->nargs++;
			chp_skip_space(ps);
			if (*ps->p == ',')
			{
				ps->p++;
				continue;
			}
			if (*ps->p == ')')
			{
				ps->p++;
				end = ps->p;
				break;
			}
			chp_fail(ps, "expected \",\" or \")\"");
			return NULL;
		}
	}
	n->text = pnstrdup(s, end - s);
	return n;
}

static ChType *ch_type_from_node(ChNode *n, char **error, const char *whole);

static bool
ch_args_numbers(ChNode *n, int min, int max)
{
	if (n->nargs < min || n->nargs > max)
		return false;
	for (int i = 0; i < n->nargs; i++)
		if (n->args[i].kind != CHARG_NUMBER)
			return false;
	return true;
}

static const struct
{
	const char *name;
	ChKind		kind;
	int			bytes;
}			ch_simple_types[] =
{
	{"Int8", CH_INT, 1}, {"Int16", CH_INT, 2}, {"Int32", CH_INT, 4},
	{"Int64", CH_INT, 8}, {"Int128", CH_INT, 16}, {"Int256", CH_INT, 32},
	{"UInt8", CH_UINT, 1}, {"UInt16", CH_UINT, 2}, {"UInt32", CH_UINT, 4},
	{"UInt64", CH_UINT, 8}, {"UInt128", CH_UINT, 16}, {"UInt256", CH_UINT, 32},
	{"Float32", CH_FLOAT32, 4}, {"Float64", CH_FLOAT64, 8},
	{"Bool", CH_BOOL, 1}, {"String", CH_STRING, 0},
	{"Date", CH_DATE, 2}, {"Date32", CH_DATE32, 4}, {"UUID", CH_UUID, 16},
};

static int
decimal_bytes(int precision)
{
	if (precision <= 9)
		return 4;
	if (precision <= 18)
		return 8;
	if (precision <= 38)
		return 16;
	return 32;
}

static ChType *
ch_type_from_node(ChNode *n, char **error, const char *whole)
{
	ChType	   *t = palloc0(sizeof(ChType));

	if (strcmp(n->name, "Nullable") == 0 || strcmp(n->name, "LowCardinality") == 0)
	{
		ChType	   *inner;

		if (n->nargs != 1 || n->args[0].kind != CHARG_TYPE)
		{
			*error = psprintf("cannot parse ClickHouse type \"%s\": %s takes one type argument",
							  whole, n->name);
			return NULL;
		}
		inner = ch_type_from_node(n->args[0].node, error, whole);
		if (inner == NULL)
			return NULL;
		if (n->name[0] == 'N')
		{
			if (inner->nullable)
			{
				*error = psprintf("ClickHouse type \"%s\" nests Nullable in Nullable", whole);
				return NULL;
			}
			if (inner->kind == CH_ARRAY)
			{
				*error = psprintf("ClickHouse type \"%s\" is not valid: ClickHouse has no Nullable(Array(...))",
								  whole);
				return NULL;
			}
			inner->nullable = true;
		}
		/* LowCardinality(T) is encoded as T in RowBinary */
		return inner;
	}

	for (int i = 0; i < (int) lengthof(ch_simple_types); i++)
	{
		if (strcmp(n->name, ch_simple_types[i].name) == 0)
		{
			if (n->nargs != 0)
			{
				*error = psprintf("cannot parse ClickHouse type \"%s\": %s takes no arguments",
								  whole, n->name);
				return NULL;
			}
			t->kind = ch_simple_types[i].kind;
			t->bytes = ch_simple_types[i].bytes;
			t->text = pstrdup(n->name);
			return t;
		}
	}

	if (strcmp(n->name, "Decimal") == 0)
	{
		if (!ch_args_numbers(n, 0, 2))
		{
			*error = psprintf("cannot parse ClickHouse type \"%s\": Decimal takes (P[, S])", whole);
			return NULL;
		}
		t->kind = CH_DECIMAL;
		t->precision = n->nargs >= 1 ? (int) n->args[0].number : 10;
		t->scale = n->nargs >= 2 ? (int) n->args[1].number : 0;
	}
	else if (strcmp(n->name, "Decimal32") == 0 || strcmp(n->name, "Decimal64") == 0 ||
			 strcmp(n->name, "Decimal128") == 0 || strcmp(n->name, "Decimal256") == 0)
	{
		if (!ch_args_numbers(n, 1, 1))
		{
			*error = psprintf("cannot parse ClickHouse type \"%s\": %s takes (S)", whole, n->name);
			return NULL;
		}
		t->kind = CH_DECIMAL;
		t->precision = strcmp(n->name, "Decimal32") == 0 ? 9 :
			strcmp(n->name, "Decimal64") == 0 ? 18 :
			strcmp(n->name, "Decimal128") == 0 ? 38 : 76;
		t->scale = (int) n->args[0].number;
	}
	else if (strcmp(n->name, "DateTime64") == 0)
	{
		if (n->nargs < 1 || n->nargs > 2 || n->args[0].kind != CHARG_NUMBER ||
			(n->nargs == 2 && n->args[1].kind != CHARG_STRING))
		{
			*error = psprintf("cannot parse ClickHouse type \"%s\": DateTime64 takes (p[, 'timezone'])",
							  whole);
			return NULL;
		}
		t->kind = CH_DATETIME64;
		t->bytes = 8;
		t->precision = (int) n->args[0].number;
		if (t->precision < 0 || t->precision > 9)
		{
			*error = psprintf("ClickHouse type \"%s\" is not valid: DateTime64 precision must be between 0 and 9",
							  whole);
			return NULL;
		}
		t->tz = n->nargs == 2 ? n->args[1].string : NULL;
		if (t->tz)
			t->text = psprintf("DateTime64(%d, '%s')", t->precision, t->tz);
		else
			t->text = psprintf("DateTime64(%d)", t->precision);
		return t;
	}
	else if (strcmp(n->name, "Array") == 0)
	{
		if (n->nargs != 1 || n->args[0].kind != CHARG_TYPE)
		{
			*error = psprintf("cannot parse ClickHouse type \"%s\": Array takes one type argument",
							  whole);
			return NULL;
		}
		t->kind = CH_ARRAY;
		t->elem = ch_type_from_node(n->args[0].node, error, whole);
		if (t->elem == NULL)
			return NULL;
		t->text = psprintf("Array(%s%s%s)", t->elem->nullable ? "Nullable(" : "",
						   t->elem->text, t->elem->nullable ? ")" : "");
		return t;
	}
	else
	{
		/*
		 * Anything else (FixedString, DateTime, Map, Tuple, Enum8, ...) is
		 * a valid ClickHouse type that no PostgreSQL type maps to; keep its
		 * name so that parity can say so.
		 */
		t->kind = CH_OTHER;
		t->text = n->text ? n->text : pstrdup(n->name);
		return t;
	}

	/* Decimal */
	if (t->precision < 1 || t->precision > RB_MAX_DECIMAL_PRECISION ||
		t->scale < 0 || t->scale > t->precision)
	{
		*error = psprintf("ClickHouse type \"%s\" is not valid: Decimal needs 1 <= P <= 76 and 0 <= S <= P",
						  whole);
		return NULL;
	}
	t->bytes = decimal_bytes(t->precision);
	t->text = psprintf("Decimal(%d, %d)", t->precision, t->scale);
	return t;
}

/* Parse a ClickHouse type; NULL and *error set when it cannot be parsed. */
static ChType *
ch_type_parse(const char *text, char **error)
{
	ChParser	ps;
	ChNode	   *n;
	ChType	   *t;

	*error = NULL;
	if (text == NULL)
	{
		*error = pstrdup("no ClickHouse type given");
		return NULL;
	}
	ps.p = ps.start = text;
	ps.error = NULL;
	n = chp_node(&ps, 0);
	if (n == NULL)
	{
		*error = ps.error;
		return NULL;
	}
	chp_skip_space(&ps);
	if (*ps.p != '\0')
	{
		chp_fail(&ps, "unexpected trailing text");
		*error = ps.error;
		return NULL;
	}
	t = ch_type_from_node(n, error, text);
	return t;
}

/* ----------------------------------------------------------------
 * PostgreSQL types
 * ----------------------------------------------------------------
 */

static bool
pg_scalar_supported(Oid typid)
{
	switch (typid)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case FLOAT4OID:
		case FLOAT8OID:
		case NUMERICOID:
		case BOOLOID:
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
		case NAMEOID:
		case BYTEAOID:
		case JSONOID:
		case JSONBOID:
		case DATEOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
		case UUIDOID:
			return true;
		default:
			return false;
	}
}

/*
 * Resolve domains to their base type.  For an array type, *elem is set to
 * the (domain-resolved) element type, else InvalidOid.  The typmod of an
 * array column applies to its elements.
 */
static Oid
pg_resolve_type(Oid typid, int32 *typmod, Oid *elem)
{
	Oid			base = getBaseTypeAndTypmod(typid, typmod);
	Oid			e;

	*elem = InvalidOid;
	e = get_element_type(base);
	if (OidIsValid(e) && get_typlen(base) == -1)
	{
		int32		etm = *typmod;

		*elem = getBaseTypeAndTypmod(e, &etm);
		if (etm != *typmod && *typmod == -1)
			*typmod = etm;
	}
	return base;
}

bool
rb_type_supported(Oid typid)
{
	int32		typmod = -1;
	Oid			elem;
	Oid			base = pg_resolve_type(typid, &typmod, &elem);

	if (OidIsValid(elem))
		return pg_scalar_supported(elem);
	return pg_scalar_supported(base);
}

/* numeric typmod -> precision/scale, or false when unconstrained */
static bool
numeric_typmod_ps(int32 typmod, int *precision, int *scale)
{
	if (typmod < (int32) VARHDRSZ)
		return false;
	*precision = ((typmod - VARHDRSZ) >> 16) & 0xffff;
	/* scale may be negative in PostgreSQL 15: sign-extend the low 11 bits */
	*scale = (((typmod - VARHDRSZ) & 0x7ff) ^ 1024) - 1024;
	return true;
}

static char *
default_scalar_ch_type(Oid typid, int32 typmod)
{
	int			p,
				s;

	switch (typid)
	{
		case INT2OID:
			return pstrdup("Int16");
		case INT4OID:
			return pstrdup("Int32");
		case INT8OID:
			return pstrdup("Int64");
		case FLOAT4OID:
			return pstrdup("Float32");
		case FLOAT8OID:
			return pstrdup("Float64");
		case NUMERICOID:
			if (numeric_typmod_ps(typmod, &p, &s) && s >= 0 && s <= p &&
				p <= RB_MAX_DECIMAL_PRECISION)
				return psprintf("Decimal(%d, %d)", p, s);
			if (numeric_typmod_ps(typmod, &p, &s) && s < 0 &&
				p - s <= RB_MAX_DECIMAL_PRECISION)
				return psprintf("Decimal(%d, 0)", p - s);
			if (typmod < 0)
				return pstrdup("Decimal(38, 10)");
			return NULL;
		case BOOLOID:
			return pstrdup("Bool");
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
		case NAMEOID:
		case BYTEAOID:
		case JSONOID:
		case JSONBOID:
			return pstrdup("String");
		case DATEOID:
			return pstrdup("Date32");
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
			return psprintf("DateTime64(%d, 'UTC')",
							(typmod >= 0 && typmod <= 6) ? typmod : 6);
		case UUIDOID:
			return pstrdup("UUID");
		default:
			return NULL;
	}
}

char *
rb_default_ch_type(Oid typid, int32 typmod, bool pg_notnull)
{
	Oid			elem;
	Oid			base = pg_resolve_type(typid, &typmod, &elem);
	char	   *t;

	if (OidIsValid(elem))
	{
		/* ClickHouse has no Nullable(Array(...)): needs a NOT NULL column */
		if (!pg_notnull || !pg_scalar_supported(elem))
			return NULL;
		t = default_scalar_ch_type(elem, typmod);
		if (t == NULL)
			return NULL;
		/* elements of a PostgreSQL array can always be NULL */
		return psprintf("Array(Nullable(%s))", t);
	}
	t = default_scalar_ch_type(base, typmod);
	if (t == NULL || pg_notnull)
		return t;
	return psprintf("Nullable(%s)", t);
}

/*
 * Scalar parity: can PostgreSQL type typid be written as ClickHouse type
 * t (nullability aside)?  NULL if so, else a sentence.
 */
static char *
scalar_parity(Oid typid, int32 typmod, const ChType *t)
{
	const char *pgname = format_type_with_typemod(typid, typmod);

	switch (typid)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
			{
				int			need = typid == INT2OID ? 2 : typid == INT4OID ? 4 : 8;

				if (t->kind == CH_INT && t->bytes >= need)
					return NULL;
				if (t->kind == CH_INT)
					return psprintf("%s does not fit %s (narrowing is refused; use Int%d or wider)",
									pgname, t->text, need * 8);
				break;
			}
		case FLOAT4OID:
			if (t->kind == CH_FLOAT32 || t->kind == CH_FLOAT64)
				return NULL;
			break;
		case FLOAT8OID:
			if (t->kind == CH_FLOAT64)
				return NULL;
			if (t->kind == CH_FLOAT32)
				return psprintf("%s does not fit %s (narrowing is refused; use Float64)",
								pgname, t->text);
			break;
		case NUMERICOID:
			if (t->kind == CH_DECIMAL)
				return NULL;	/* fidelity is checked per value */
			break;
		case BOOLOID:
			if (t->kind == CH_BOOL || (t->kind == CH_UINT && t->bytes == 1))
				return NULL;
			break;
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
		case NAMEOID:
		case BYTEAOID:
		case JSONOID:
		case JSONBOID:
			if (t->kind == CH_STRING)
				return NULL;
			break;
		case DATEOID:
			if (t->kind == CH_DATE32 || t->kind == CH_DATE)
				return NULL;
			break;
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
			if (t->kind == CH_DATETIME64)
			{
				if (t->tz == NULL || strcmp(t->tz, "UTC") != 0)
					return psprintf("%s needs DateTime64(p, 'UTC'), not %s",
									pgname, t->text);
				if (t->precision > 6)
					return psprintf("%s needs DateTime64(p, 'UTC') with p <= 6, not %s",
									pgname, t->text);
				return NULL;
			}
			break;
		case UUIDOID:
			if (t->kind == CH_UUID)
				return NULL;
			break;
		default:
			return psprintf("PostgreSQL type %s is not supported", pgname);
	}
	{
		char	   *want = default_scalar_ch_type(typid, typmod);

		return psprintf("%s cannot be written as ClickHouse %s (expected %s)",
						pgname, t->text, want ? want : "a matching type");
	}
}

/*
 * Parity of a resolved PostgreSQL type (base, elem) against a parsed
 * ClickHouse type.
 */
static char *
parity_resolved(Oid base, Oid elem, int32 typmod, bool pg_notnull,
				const ChType *t)
{
	if (OidIsValid(elem))
	{
		if (!pg_scalar_supported(elem))
			return psprintf("PostgreSQL type %s is not supported",
							format_type_be(base));
		if (t->kind != CH_ARRAY)
			return psprintf("%s needs a ClickHouse Array type, not %s",
							format_type_be(base), t->text);
		if (!pg_notnull)
			return psprintf("a PostgreSQL array column that may hold NULLs cannot be written as %s: ClickHouse has no Nullable(Array(...)); declare the column NOT NULL",
							t->text);
		if (t->elem->kind == CH_ARRAY)
			return psprintf("one-dimensional PostgreSQL arrays cannot be written as %s",
							t->text);
		return scalar_parity(elem, typmod, t->elem);
	}
	if (!pg_scalar_supported(base))
		return psprintf("PostgreSQL type %s is not supported",
						format_type_be(base));
	if (t->kind == CH_ARRAY)
		return psprintf("%s is not an array type and cannot be written as %s",
						format_type_be(base), t->text);
	if (!pg_notnull && !t->nullable)
		return psprintf("the PostgreSQL column may hold NULLs but ClickHouse type %s is not Nullable; use Nullable(%s) or declare the column NOT NULL",
						t->text, t->text);
	return scalar_parity(base, typmod, t);
}

char *
rb_type_parity(Oid typid, int32 typmod, bool pg_notnull, const char *ch_type)
{
	char	   *error;
	ChType	   *t = ch_type_parse(ch_type, &error);
	Oid			elem;
	Oid			base;

	if (t == NULL)
		return error;
	base = pg_resolve_type(typid, &typmod, &elem);
	return parity_resolved(base, elem, typmod, pg_notnull, t);
}

/* ----------------------------------------------------------------
 * Encoders
 * ----------------------------------------------------------------
 */

typedef struct RbCol RbCol;
typedef void (*RbValueFn) (RbEncoder *enc, const RbCol *col, Datum value,
						   StringInfo out);

struct RbCol
{
	RbValueFn	fn;				/* encodes one non-NULL value */
	bool		nullable;		/* ClickHouse side is Nullable */
	const char *name;
	Oid			typid;			/* resolved base (element) type */
	int32		typmod;
	const ChType *ch;			/* ClickHouse type without Nullable */
	int			bytes;			/* output width of ints and decimals */
	int			precision;		/* Decimal P, DateTime64 p */
	int			scale;			/* Decimal S */
	int64		tick_div;		/* 10^(6-p) for DateTime64(p) */
	/* arrays */
	RbCol	   *elem;
	int16		elmlen;
	bool		elmbyval;
	char		elmalign;
};

struct RbEncoder
{
	int			ncols;
	RbCol	   *cols;
	int			window_index;
	Oid			window_typid;
	/* the row being encoded, for error details */
	const Datum *cur_values;
	const bool *cur_isnull;
	StringInfoData scratch;		/* jsonb text */
};

/* ---------- low-level appends ---------- */

static inline char *
rb_reserve(StringInfo out, int n)
{
	char	   *p;

	enlargeStringInfo(out, n);
	p = out->data + out->len;
	out->len += n;
	out->data[out->len] = '\0';
	return p;
}

static inline void
rb_put_byte(StringInfo out, uint8 b)
{
	enlargeStringInfo(out, 1);
	out->data[out->len++] = (char) b;
	out->data[out->len] = '\0';
}

static inline void
rb_store_le64(char *p, uint64 v)
{
#ifdef WORDS_BIGENDIAN
	v = pg_bswap64(v);
#endif
	memcpy(p, &v, 8);
}

static inline void
rb_store_le32(char *p, uint32 v)
{
#ifdef WORDS_BIGENDIAN
	v = pg_bswap32(v);
#endif
	memcpy(p, &v, 4);
}

static inline void
rb_store_le16(char *p, uint16 v)
{
#ifdef WORDS_BIGENDIAN
	v = pg_bswap16(v);
#endif
	memcpy(p, &v, 2);
}

/* A signed integer as a little-endian two's complement of bytes bytes. */
static inline void
rb_put_int(StringInfo out, int64 v, int bytes)
{
	char	   *p = rb_reserve(out, bytes);

	switch (bytes)
	{
		case 1:
			p[0] = (char) (uint8) v;
			break;
		case 2:
			rb_store_le16(p, (uint16) v);
			break;
		case 4:
			rb_store_le32(p, (uint32) v);
			break;
		default:
			rb_store_le64(p, (uint64) v);
			/* sign-extend into Int128 / Int256 */
			memset(p + 8, v < 0 ? 0xff : 0x00, bytes - 8);
			break;
	}
}

static inline void
rb_put_bytes(StringInfo out, const char *data, Size len)
{
	char		lenbuf[10];
	int			n = 0;
	uint64		l = len;
	char	   *p;

	/* String: unsigned LEB128 length, then the bytes */
	do
	{
		uint8		b = l & 0x7f;

		l >>= 7;
		lenbuf[n++] = (char) (l ? (b | 0x80) : b);
	} while (l);
	if ((Size) n + len >= (Size) (MaxAllocSize - 1))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("encoded value of %zu bytes is too large", len)));
	p = rb_reserve(out, n + (int) len);
	memcpy(p, lenbuf, n);
	memcpy(p + n, data, len);
}

/* ---------- error reporting (cold paths) ---------- */

static char *
rb_format_timestamp(Timestamp ts, bool with_tz)
{
	char		buf[MAXDATELEN + 1];
	struct pg_tm tm;
	fsec_t		fsec;

	if (TIMESTAMP_NOT_FINITE(ts))
		EncodeSpecialTimestamp(ts, buf);
	else if (timestamp2tm(ts, NULL, &tm, &fsec, NULL, NULL) == 0)
	{
		/* converted as UTC: tm_isdst is -1, which would hide the offset */
		tm.tm_isdst = 0;
		EncodeDateTime(&tm, fsec, with_tz, 0, NULL, USE_ISO_DATES, buf);
	}
	else
		snprintf(buf, sizeof(buf), "(timestamp " INT64_FORMAT ")", (int64) ts);
	return pstrdup(buf);
}

/*
 * A value as text for error messages.  Timestamps with time zone are shown
 * in UTC, whatever the session's TimeZone.
 */
static char *
rb_value_text(Oid typid, Datum value)
{
	Oid			outfn;
	bool		isvarlena;

	if (typid == TIMESTAMPTZOID)
		return rb_format_timestamp(DatumGetTimestampTz(value), true);
	if (typid == TIMESTAMPOID)
		return rb_format_timestamp(DatumGetTimestamp(value), false);
	if (typid == DATEOID)
	{
		DateADT		d = DatumGetDateADT(value);
		char		buf[MAXDATELEN + 1];
		struct pg_tm tm;

		if (DATE_NOT_FINITE(d))
			EncodeSpecialDate(d, buf);
		else
		{
			j2date(d + POSTGRES_EPOCH_JDATE, &tm.tm_year, &tm.tm_mon, &tm.tm_mday);
			EncodeDateOnly(&tm, USE_ISO_DATES, buf);
		}
		return pstrdup(buf);
	}
	getTypeOutputInfo(typid, &outfn, &isvarlena);
	return OidOutputFunctionCall(outfn, value);
}

/* errdetail naming the row by its window value (0 when there is none) */
static int
rb_row_detail(RbEncoder *enc)
{
	int			w = enc->window_index;

	if (w < 0 || enc->cur_values == NULL)
		return 0;
	if (enc->cur_isnull[w])
		return errdetail("Row with NULL window value.");
	return errdetail("Row with window value %s.",
					 rb_value_text(enc->window_typid, enc->cur_values[w]));
}

static void pg_attribute_noreturn()
rb_value_error(RbEncoder *enc, const RbCol *col, Datum value, int sqlstate,
			   const char *why)
{
	char	   *vtext = rb_value_text(col->typid, value);

	ereport(ERROR,
			(errcode(sqlstate),
			 errmsg("value %s of column \"%s\" %s", vtext, col->name, why),
			 rb_row_detail(enc)));
	pg_unreachable();
}

static void pg_attribute_noreturn()
rb_null_error(RbEncoder *enc, const RbCol *col, bool element)
{
	if (element)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("array column \"%s\" holds a NULL element but ClickHouse type %s has no Nullable elements",
						col->name, col->ch->text),
				 errhint("Use Array(Nullable(...)) on the ClickHouse side."),
				 rb_row_detail(enc)));
	ereport(ERROR,
			(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			 errmsg("column \"%s\" is NULL but ClickHouse type %s is not Nullable",
					col->name, col->ch->text),
			 rb_row_detail(enc)));
	pg_unreachable();
}

/* ---------- scalar encoders ---------- */

static void
enc_int2(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	rb_put_int(out, (int64) DatumGetInt16(value), col->bytes);
}

static void
enc_int4(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	rb_put_int(out, (int64) DatumGetInt32(value), col->bytes);
}

static void
enc_int8(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	rb_put_int(out, DatumGetInt64(value), col->bytes);
}

static void
enc_float4(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	float4		f = DatumGetFloat4(value);
	uint32		bits;

	/* IEEE bytes as they are: NaN, infinities and -0.0 included */
	memcpy(&bits, &f, 4);
	rb_store_le32(rb_reserve(out, 4), bits);
}

static void
enc_float4_as_8(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	float8		f = (float8) DatumGetFloat4(value);	/* exact */
	uint64		bits;

	memcpy(&bits, &f, 8);
	rb_store_le64(rb_reserve(out, 8), bits);
}

static void
enc_float8(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	float8		f = DatumGetFloat8(value);
	uint64		bits;

	memcpy(&bits, &f, 8);
	rb_store_le64(rb_reserve(out, 8), bits);
}

static void
enc_bool(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	rb_put_byte(out, DatumGetBool(value) ? 1 : 0);
}

/* text, varchar, bpchar (as stored, padded), bytea, json: the raw bytes */
static void
enc_varlena(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	struct varlena *orig = (struct varlena *) DatumGetPointer(value);
	struct varlena *v = pg_detoast_datum_packed(orig);

	rb_put_bytes(out, VARDATA_ANY(v), VARSIZE_ANY_EXHDR(v));
	if (v != orig)
		pfree(v);
}

static void
enc_name(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	const char *s = NameStr(*DatumGetName(value));

	rb_put_bytes(out, s, strnlen(s, NAMEDATALEN));
}

/* jsonb: its canonical text, through jsonb's own printer */
static void
enc_jsonb(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	Jsonb	   *jb = DatumGetJsonbP(value);

	resetStringInfo(&enc->scratch);
	JsonbToCString(&enc->scratch, &jb->root, VARSIZE(jb));
	rb_put_bytes(out, enc->scratch.data, enc->scratch.len);
	if ((Pointer) jb != DatumGetPointer(value))
		pfree(jb);
}

static void
enc_uuid(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	const unsigned char *u = DatumGetUUIDP(value)->data;
	char	   *p = rb_reserve(out, 16);

	/*
	 * ClickHouse keeps a UUID as two UInt64 halves, each the big-endian
	 * reading of 8 RFC bytes, written little-endian: each half reversed.
	 */
	for (int i = 0; i < 8; i++)
	{
		p[i] = (char) u[7 - i];
		p[8 + i] = (char) u[15 - i];
	}
}

static void
enc_date32(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	DateADT		d = DatumGetDateADT(value);
	int64		days;

	if (DATE_NOT_FINITE(d))
		rb_value_error(enc, col, value, ERRCODE_DATETIME_VALUE_OUT_OF_RANGE,
					   "is infinite and cannot be written as Date32");
	days = (int64) d + RB_UNIX_EPOCH_JDAYS;
	if (days < RB_DATE32_MIN_DAYS || days > RB_DATE32_MAX_DAYS)
		rb_value_error(enc, col, value, ERRCODE_DATETIME_VALUE_OUT_OF_RANGE,
					   "is outside the range of Date32 (1900-01-01 .. 2299-12-31)");
	rb_store_le32(rb_reserve(out, 4), (uint32) (int32) days);
}

static void
enc_date16(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	DateADT		d = DatumGetDateADT(value);
	int64		days;

	if (DATE_NOT_FINITE(d))
		rb_value_error(enc, col, value, ERRCODE_DATETIME_VALUE_OUT_OF_RANGE,
					   "is infinite and cannot be written as Date");
	days = (int64) d + RB_UNIX_EPOCH_JDAYS;
	if (days < 0 || days > RB_DATE_MAX_DAYS)
		rb_value_error(enc, col, value, ERRCODE_DATETIME_VALUE_OUT_OF_RANGE,
					   "is outside the range of Date (1970-01-01 .. 2149-06-06)");
	rb_store_le16(rb_reserve(out, 2), (uint16) days);
}

/*
 * timestamp and timestamptz -> DateTime64(p, 'UTC').  Both are int64
 * microseconds since 2000-01-01; timestamp without time zone is read as
 * UTC.
 */
static void
enc_datetime64(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	int64		ts = DatumGetInt64(value);
	int64		us;
	int64		ticks;

	if (TIMESTAMP_NOT_FINITE(ts))
		rb_value_error(enc, col, value, ERRCODE_DATETIME_VALUE_OUT_OF_RANGE,
					   psprintf("is infinite and cannot be written as %s", col->ch->text));
	us = ts + RB_PG_TO_UNIX_US;	/* cannot overflow for finite values */
	if (us < RB_DT64_MIN_US || us > RB_DT64_MAX_US)
		rb_value_error(enc, col, value, ERRCODE_DATETIME_VALUE_OUT_OF_RANGE,
					   psprintf("is outside the range of %s (1900-01-01 00:00:00 .. 2299-12-31 23:59:59.999999 UTC)",
								col->ch->text));
	if (col->tick_div == 1)
		ticks = us;
	else
	{
		if (us % col->tick_div != 0)
			rb_value_error(enc, col, value, ERRCODE_DATETIME_VALUE_OUT_OF_RANGE,
						   psprintf("is not representable in %s exactly (it has digits below 10^-%d s)",
									col->ch->text, col->precision));
		ticks = us / col->tick_div;
	}
	rb_store_le64(rb_reserve(out, 8), (uint64) ticks);
}

/* ---------- numeric -> Decimal ---------- */

/*
 * The stored form of numeric (fixed since PostgreSQL 9.1 by pg_upgrade
 * compatibility): after the varlena header, a uint16 header word; if its
 * top two bits are 10 ("short"), sign, display scale and a 7-bit weight
 * are packed in it, if 00 or 01 ("long", positive or negative) an int16
 * weight follows, and 11 marks NaN/Infinity.  Then base-10000 digits
 * (int16), most significant first; digit i is worth 10000^(weight - i).
 */
#define RB_NUM_SIGN_MASK		0xC000
#define RB_NUM_NEG				0x4000
#define RB_NUM_SHORT			0x8000
#define RB_NUM_SPECIAL			0xC000
#define RB_NUM_EXT_MASK			0xF000
#define RB_NUM_PINF				0xD000
#define RB_NUM_NINF				0xF000
#define RB_NUM_SHORT_SIGN		0x2000
#define RB_NUM_SHORT_WSIGN		0x0040
#define RB_NUM_SHORT_WMASK		0x003F

typedef struct RbNumeric
{
	int			special;		/* 0, or 1 NaN, 2 +Inf, 3 -Inf */
	bool		neg;
	int			weight;			/* of the first digit, after stripping */
	int			ndigits;		/* after stripping leading/trailing zeros */
	const char *digits;			/* int16 each, possibly unaligned */
} RbNumeric;

static inline int
rb_num_digit(const RbNumeric *n, int i)
{
	int16		d;

	memcpy(&d, n->digits + i * sizeof(int16), sizeof(int16));
	return d;
}

static void
rb_numeric_decode(struct varlena *v, RbNumeric *n)
{
	const char *p = VARDATA_ANY(v);
	Size		len = VARSIZE_ANY_EXHDR(v);
	uint16		h;
	Size		hdr;

	memset(n, 0, sizeof(*n));
	if (len < sizeof(uint16))
		elog(ERROR, "corrupt numeric value of %zu bytes", len);
	memcpy(&h, p, sizeof(uint16));
	if ((h & RB_NUM_SIGN_MASK) == RB_NUM_SPECIAL)
	{
		uint16		ext = h & RB_NUM_EXT_MASK;

		n->special = ext == RB_NUM_PINF ? 2 : ext == RB_NUM_NINF ? 3 : 1;
		return;
	}
	if ((h & RB_NUM_SIGN_MASK) == RB_NUM_SHORT)
	{
		n->neg = (h & RB_NUM_SHORT_SIGN) != 0;
		n->weight = (h & RB_NUM_SHORT_WSIGN) ? (int) (~RB_NUM_SHORT_WMASK | (h & RB_NUM_SHORT_WMASK))
			: (int) (h & RB_NUM_SHORT_WMASK);
		hdr = sizeof(uint16);
	}
	else
	{
		int16		w;

		if (len < 2 * sizeof(uint16))
			elog(ERROR, "corrupt numeric value of %zu bytes", len);
		n->neg = (h & RB_NUM_SIGN_MASK) == RB_NUM_NEG;
		memcpy(&w, p + sizeof(uint16), sizeof(int16));
		n->weight = w;
		hdr = 2 * sizeof(uint16);
	}
	n->digits = p + hdr;
	n->ndigits = (int) ((len - hdr) / sizeof(int16));

	/* PostgreSQL stores numerics stripped; do not depend on it */
	while (n->ndigits > 0 && rb_num_digit(n, 0) == 0)
	{
		n->digits += sizeof(int16);
		n->ndigits--;
		n->weight--;
	}
	while (n->ndigits > 0 && rb_num_digit(n, n->ndigits - 1) == 0)
		n->ndigits--;
}

/* number of decimal digits of 1 <= d <= 9999 */
static inline int
rb_digit_width(int d)
{
	return d >= 1000 ? 4 : d >= 100 ? 3 : d >= 10 ? 2 : 1;
}

/*
 * Checks that n fits Decimal(P, S) exactly; returns false if not.
 * *why says which rule failed.
 */
static bool
rb_numeric_fits(const RbNumeric *n, int precision, int scale, const char **why)
{
	int			intdigits;
	int			last;
	int			lastexp;

	if (n->ndigits == 0)
		return true;
	intdigits = n->weight >= 0 ? 4 * n->weight + rb_digit_width(rb_num_digit(n, 0)) : 0;
	if (intdigits > precision - scale)
	{
		*why = "has too many integer digits";
		return false;
	}
	/* the last (non-zero) digit must not reach below 10^-S */
	last = rb_num_digit(n, n->ndigits - 1);
	lastexp = 4 * (n->weight - (n->ndigits - 1));	/* exponent of its unit */
	if (lastexp < 0)
	{
		int			tz = 0;		/* trailing decimal zeros of last */

		while (tz < 3 && last % 10 == 0)
		{
			last /= 10;
			tz++;
		}
		if (lastexp + tz < -scale)
		{
			*why = "has non-zero digits beyond the scale";
			return false;
		}
	}
	return true;
}

/*
 * |n| x 10^S as an unsigned integer in 32-bit limbs (little-endian limb
 * order), for Decimal128/256.  rb_numeric_fits() must hold: then the
 * result is below 10^P <= 10^76 < 2^256 and no step overflows.
 */
static void
rb_numeric_scaled_limbs(const RbNumeric *n, int scale, uint32 *limbs, int nlimbs)
{
	int			pending = 0;	/* decimal exponent still to multiply in */

	memset(limbs, 0, sizeof(uint32) * nlimbs);
	for (int i = 0; i < n->ndigits; i++)
	{
		int			e = 4 * (n->weight - i) + scale;
		uint32		mul,
					add;
		uint64		carry;
		int			d = rb_num_digit(n, i);

		if (e >= 0)
		{
			mul = 10000;
			add = d;
			pending = e;
		}
		else if (e > -4)
		{
			mul = (uint32) rb_pow10_u64[4 + e];
			add = d / (uint32) rb_pow10_u64[-e];
			pending = 0;
		}
		else
			break;				/* only zero digits remain (checked) */
		carry = add;
		for (int k = 0; k < nlimbs; k++)
		{
			uint64		x = (uint64) limbs[k] * mul + carry;

			limbs[k] = (uint32) x;
			carry = x >> 32;
		}
	}
	while (pending > 0)
	{
		int			step = Min(pending, 9);
		uint64		carry = 0;

		for (int k = 0; k < nlimbs; k++)
		{
			uint64		x = (uint64) limbs[k] * rb_pow10_u64[step] + carry;

			limbs[k] = (uint32) x;
			carry = x >> 32;
		}
		pending -= step;
	}
}

/* Same for P <= 18: the result is below 10^18 < 2^63. */
static uint64
rb_numeric_scaled_u64(const RbNumeric *n, int scale)
{
	uint64		acc = 0;
	int			pending = 0;

	for (int i = 0; i < n->ndigits; i++)
	{
		int			e = 4 * (n->weight - i) + scale;
		int			d = rb_num_digit(n, i);

		if (e >= 0)
		{
			acc = acc * 10000 + d;
			pending = e;
		}
		else if (e > -4)
		{
			acc = acc * rb_pow10_u64[4 + e] + d / rb_pow10_u64[-e];
			pending = 0;
		}
		else
			break;
	}
	return acc * rb_pow10_u64[pending];
}

static void
enc_decimal(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	struct varlena *orig = (struct varlena *) DatumGetPointer(value);
	struct varlena *v = pg_detoast_datum_packed(orig);
	RbNumeric	n;
	const char *why = NULL;

	rb_numeric_decode(v, &n);
	if (n.special == 1)
		rb_value_error(enc, col, value, ERRCODE_INVALID_PARAMETER_VALUE,
					   psprintf("cannot be written as %s", col->ch->text));
	if (n.special != 0)
		rb_value_error(enc, col, value, ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
					   psprintf("is infinite and cannot be written as %s", col->ch->text));
	if (!rb_numeric_fits(&n, col->precision, col->scale, &why))
		rb_value_error(enc, col, value, ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
					   psprintf("does not fit %s exactly (it %s)", col->ch->text, why));

	if (col->bytes <= 8)
	{
		uint64		m = rb_numeric_scaled_u64(&n, col->scale);
		int64		s = n.neg ? -(int64) m : (int64) m;

		rb_put_int(out, s, col->bytes);
	}
	else
	{
		uint32		limbs[8];
		int			nlimbs = col->bytes / 4;
		char	   *p;

		rb_numeric_scaled_limbs(&n, col->scale, limbs, nlimbs);
		if (n.neg)
		{
			/* two's complement: invert and add one */
			uint64		carry = 1;

			for (int k = 0; k < nlimbs; k++)
			{
				uint64		x = (uint64) (uint32) ~limbs[k] + carry;

				limbs[k] = (uint32) x;
				carry = x >> 32;
			}
		}
		p = rb_reserve(out, col->bytes);
		for (int k = 0; k < nlimbs; k++)
			rb_store_le32(p + 4 * k, limbs[k]);
	}
	if (v != orig)
		pfree(v);
}

/* ---------- arrays ---------- */

static void
enc_array(RbEncoder *enc, const RbCol *col, Datum value, StringInfo out)
{
	ArrayType  *arr = DatumGetArrayTypeP(value);
	const RbCol *ecol = col->elem;
	int			ndim = ARR_NDIM(arr);
	int			nitems;
	char		lenbuf[10];
	int			n = 0;
	uint64		l;

	if (ndim > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("column \"%s\" holds a %d-dimensional array, but only one-dimensional arrays can be written as %s",
						col->name, ndim, col->ch->text),
				 rb_row_detail(enc)));
	nitems = ndim == 0 ? 0 : ArrayGetNItems(ndim, ARR_DIMS(arr));

	l = (uint64) nitems;
	do
	{
		uint8		b = l & 0x7f;

		l >>= 7;
		lenbuf[n++] = (char) (l ? (b | 0x80) : b);
	} while (l);
	memcpy(rb_reserve(out, n), lenbuf, n);

	if (nitems > 0)
	{
		/* walk the flat array: data after the header, dims and bitmap */
		bits8	   *bitmap = ARR_NULLBITMAP(arr);
		char	   *p = (char *) arr + (ARR_HASNULL(arr) ? (Size) arr->dataoffset :
										(Size) ARR_OVERHEAD_NONULLS(ndim));

		for (int i = 0; i < nitems; i++)
		{
			Datum		e;

			if (bitmap && (bitmap[i / 8] & (1 << (i % 8))) == 0)
			{
				if (!ecol->nullable)
					rb_null_error(enc, col, true);
				rb_put_byte(out, 1);
				continue;
			}
			e = fetch_att(p, col->elmbyval, col->elmlen);
			p = att_addlength_pointer(p, col->elmlen, p);
			p = (char *) att_align_nominal(p, col->elmalign);
			if (ecol->nullable)
				rb_put_byte(out, 0);
			ecol->fn(enc, ecol, e, out);
		}
	}
	if ((Pointer) arr != DatumGetPointer(value))
		pfree(arr);
}

/* ---------- encoder construction ---------- */

static RbValueFn
choose_scalar_fn(Oid typid, const ChType *t)
{
	switch (typid)
	{
		case INT2OID:
			return enc_int2;
		case INT4OID:
			return enc_int4;
		case INT8OID:
			return enc_int8;
		case FLOAT4OID:
			return t->kind == CH_FLOAT64 ? enc_float4_as_8 : enc_float4;
		case FLOAT8OID:
			return enc_float8;
		case NUMERICOID:
			return enc_decimal;
		case BOOLOID:
			return enc_bool;
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
		case BYTEAOID:
		case JSONOID:
			return enc_varlena;
		case NAMEOID:
			return enc_name;
		case JSONBOID:
			return enc_jsonb;
		case DATEOID:
			return t->kind == CH_DATE ? enc_date16 : enc_date32;
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
			return enc_datetime64;
		case UUIDOID:
			return enc_uuid;
		default:
			elog(ERROR, "no RowBinary encoder for type %u", typid);
	}
	return NULL;				/* keep compiler quiet */
}

static void
init_scalar_col(RbCol *c, Oid typid, int32 typmod, const ChType *t)
{
	c->typid = typid;
	c->typmod = typmod;
	c->ch = t;
	c->nullable = t->nullable;
	c->bytes = t->bytes;
	c->precision = t->precision;
	c->scale = t->scale;
	c->tick_div = t->kind == CH_DATETIME64 ? (int64) rb_pow10_u64[6 - t->precision] : 1;
	c->fn = choose_scalar_fn(typid, t);
}

RbEncoder *
rb_encoder_create(int ncols, char *const *names, const Oid *typids,
				  const int32 *typmods, const bool *pg_notnull,
				  char *const *ch_types, int window_index)
{
	RbEncoder  *enc = palloc0(sizeof(RbEncoder));

	enc->ncols = ncols;
	enc->cols = palloc0(sizeof(RbCol) * Max(ncols, 1));
	enc->window_index = (window_index >= 0 && window_index < ncols) ? window_index : -1;
	initStringInfo(&enc->scratch);

	for (int i = 0; i < ncols; i++)
	{
		RbCol	   *c = &enc->cols[i];
		int32		typmod = typmods[i];
		Oid			elem;
		Oid			base = pg_resolve_type(typids[i], &typmod, &elem);
		char	   *error;
		ChType	   *t = ch_type_parse(ch_types[i], &error);

		c->name = pstrdup(names[i]);
		if (t != NULL)
			error = parity_resolved(base, elem, typmod, pg_notnull[i], t);
		if (error != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"%s\" of type %s cannot be written as ClickHouse type %s",
							names[i], format_type_with_typemod(typids[i], typmods[i]),
							ch_types[i] ? ch_types[i] : "(none)"),
					 errdetail("%s", error),
					 errhint("See the dpwin type map (docs/types.md).")));

		if (OidIsValid(elem))
		{
			RbCol	   *e = palloc0(sizeof(RbCol));

			e->name = c->name;
			init_scalar_col(e, elem, typmod, t->elem);
			c->typid = base;
			c->typmod = typmod;
			c->ch = t;
			c->nullable = false;
			c->elem = e;
			c->fn = enc_array;
			get_typlenbyvalalign(elem, &c->elmlen, &c->elmbyval, &c->elmalign);
		}
		else
			init_scalar_col(c, base, typmod, t);

		if (i == enc->window_index)
			enc->window_typid = base;
	}
	return enc;
}

void
rb_encode_row(RbEncoder *enc, const Datum *values, const bool *isnull,
			  StringInfo out)
{
	enc->cur_values = values;
	enc->cur_isnull = isnull;
	for (int i = 0; i < enc->ncols; i++)
	{
		const RbCol *c = &enc->cols[i];

		if (isnull[i])
		{
			if (!c->nullable)
				rb_null_error(enc, c, false);
			rb_put_byte(out, 1);
			continue;
		}
		if (c->nullable)
			rb_put_byte(out, 0);
		c->fn(enc, c, values[i], out);
	}
	enc->cur_values = NULL;
	enc->cur_isnull = NULL;
}

/* ----------------------------------------------------------------
 * Test-only SQL functions (sql/install/90_testing.sql)
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dpwin__encode_rowbinary);
PG_FUNCTION_INFO_V1(dpwin__rb_type_parity);
PG_FUNCTION_INFO_V1(dpwin__rb_default_ch_type);

/*
 * dpwin._encode_rowbinary(value anyelement, ch_type text,
 *                         window_value timestamptz DEFAULT NULL) -> bytea
 *
 * Encodes one value as a one-column row.  The column counts as NOT NULL
 * unless ch_type is Nullable.  The argument's typmod is taken from the
 * call expression, so table columns keep theirs.  With window_value, a
 * second (window) column is encoded after it and stripped again, so that
 * fidelity errors show their row detail.
 */
Datum
dpwin__encode_rowbinary(PG_FUNCTION_ARGS)
{
	Oid			typid = get_fn_expr_argtype(fcinfo->flinfo, 0);
	int32		typmod = -1;
	char	   *ch_type;
	char	   *error;
	ChType	   *t;
	bool		with_window;
	char	   *names[2] = {"value", "window"};
	Oid			typids[2];
	int32		typmods[2] = {-1, -1};
	bool		notnull[2] = {false, true};
	char	   *ch_types[2];
	Datum		values[2];
	bool		isnull[2];
	RbEncoder  *enc;
	StringInfoData buf;
	bytea	   *result;
	int			len;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ClickHouse type must not be NULL")));
	if (!OidIsValid(typid))
		ereport(ERROR,
				(errcode(ERRCODE_INDETERMINATE_DATATYPE),
				 errmsg("could not determine the type of the value")));
	if (fcinfo->flinfo->fn_expr && IsA(fcinfo->flinfo->fn_expr, FuncExpr))
	{
		List	   *args = ((FuncExpr *) fcinfo->flinfo->fn_expr)->args;

		if (list_length(args) >= 1)
			typmod = exprTypmod((Node *) linitial(args));
	}
	ch_type = text_to_cstring(PG_GETARG_TEXT_PP(1));
	/* an unparsable type is reported by rb_encoder_create() */
	t = ch_type_parse(ch_type, &error);

	with_window = PG_NARGS() >= 3 && !PG_ARGISNULL(2);
	typids[0] = typid;
	typmods[0] = typmod;
	notnull[0] = t != NULL && !t->nullable;
	ch_types[0] = ch_type;
	values[0] = PG_ARGISNULL(0) ? (Datum) 0 : PG_GETARG_DATUM(0);
	isnull[0] = PG_ARGISNULL(0);
	typids[1] = TIMESTAMPTZOID;
	ch_types[1] = "DateTime64(6, 'UTC')";
	values[1] = with_window ? PG_GETARG_DATUM(2) : (Datum) 0;
	isnull[1] = false;

	enc = rb_encoder_create(with_window ? 2 : 1, names, typids, typmods,
							notnull, ch_types, with_window ? 1 : -1);
	initStringInfo(&buf);
	rb_encode_row(enc, values, isnull, &buf);
	len = buf.len - (with_window ? 8 : 0);

	result = (bytea *) palloc(VARHDRSZ + len);
	SET_VARSIZE(result, VARHDRSZ + len);
	memcpy(VARDATA(result), buf.data, len);
	PG_RETURN_BYTEA_P(result);
}

/* dpwin._rb_type_parity(typ regtype, typmod int, notnull bool, ch_type text) -> text */
Datum
dpwin__rb_type_parity(PG_FUNCTION_ARGS)
{
	char	   *why;

	why = rb_type_parity(PG_GETARG_OID(0), PG_GETARG_INT32(1), PG_GETARG_BOOL(2),
						 text_to_cstring(PG_GETARG_TEXT_PP(3)));
	if (why == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(why));
}

/* dpwin._rb_default_ch_type(typ regtype, typmod int, notnull bool) -> text */
Datum
dpwin__rb_default_ch_type(PG_FUNCTION_ARGS)
{
	char	   *t;

	t = rb_default_ch_type(PG_GETARG_OID(0), PG_GETARG_INT32(1), PG_GETARG_BOOL(2));
	if (t == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(t));
}
