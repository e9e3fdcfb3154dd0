/*-------------------------------------------------------------------------
 *
 * chtype.c
 *	  ClickHouse type expressions and their parity with PostgreSQL types:
 *	  the parser of the types system.columns.type prints, and the rules
 *	  that say whether a PostgreSQL column can be written as such a type
 *	  exactly (docs/types.md).  The encoders (rowbinary.c) build on it.
 *
 *	  Parity is about values, not NULLs: a PostgreSQL column that may hold
 *	  NULLs is admitted for a ClickHouse type that is not Nullable, and the
 *	  encoder refuses each NULL it meets there (docs/types.md, "NULLs").
 *
 *	  No I/O.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "chtype.h"

/* ----------------------------------------------------------------
 * ClickHouse types
 * ----------------------------------------------------------------
 */

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

#define RB_MAX_DECIMAL_PRECISION 76

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
	 * A quoted string.  Callers sometimes hand over the TabSeparated spelling
	 * of system.columns.type, where quotes come escaped as \'; accept that
	 * too.
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
		 * Anything else (FixedString, DateTime, Map, Tuple, Enum8, ...) is a
		 * valid ClickHouse type that no PostgreSQL type maps to; keep its
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
ChType *
dpwin_ch_type_parse(const char *type_text, char **error)
{
	ChParser	ps;
	ChNode	   *n;
	ChType	   *t;

	*error = NULL;
	if (type_text == NULL)
	{
		*error = pstrdup("no ClickHouse type given");
		return NULL;
	}
	ps.p = ps.start = type_text;
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
	t = ch_type_from_node(n, error, type_text);
	return t;
}

/* ----------------------------------------------------------------
 * PostgreSQL types
 * ----------------------------------------------------------------
 */

/* The PostgreSQL types written as ClickHouse String. */
static bool
pg_string_type(Oid typid)
{
	switch (typid)
	{
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
		case NAMEOID:
		case BYTEAOID:
		case JSONOID:
		case JSONBOID:
			return true;
		default:
			return false;
	}
}

static char *default_scalar_ch_type(Oid typid, int32 typmod);

/* A scalar type dpwin can write: one it has a default ClickHouse type for. */
static bool
pg_scalar_supported(Oid typid)
{
	return default_scalar_ch_type(typid, -1) != NULL;
}

/*
 * Resolve domains to their base type.  For an array type, *elem is set to
 * the (domain-resolved) element type, else InvalidOid.  The typmod of an
 * array column applies to its elements.
 */
Oid
dpwin_ch_type_resolve_pg(Oid typid, int32 *typmod, Oid *elem)
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
dpwin_ch_type_supported(Oid typid)
{
	int32		typmod = -1;
	Oid			elem;
	Oid			base = dpwin_ch_type_resolve_pg(typid, &typmod, &elem);

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
		case DATEOID:
			return pstrdup("Date32");
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
			return psprintf("DateTime64(%d, 'UTC')",
							(typmod >= 0 && typmod <= 6) ? typmod : 6);
		case UUIDOID:
			return pstrdup("UUID");
		default:
			return pg_string_type(typid) ? pstrdup("String") : NULL;
	}
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
			if (!pg_string_type(typid))
				return psprintf("PostgreSQL type %s is not supported", pgname);
			if (t->kind == CH_STRING)
				return NULL;
			break;
	}
	{
		char	   *want = default_scalar_ch_type(typid, typmod);

		return psprintf("%s cannot be written as ClickHouse %s (expected %s)",
						pgname, t->text, want ? want : "a matching type");
	}
}

/*
 * Parity of a resolved PostgreSQL type (base, elem) against a parsed
 * ClickHouse type.  Whether the PostgreSQL column may hold NULLs does not
 * matter: a NULL where ClickHouse has no Nullable is refused per value by
 * the encoder (22004), like a NULL array element.
 */
char *
dpwin_ch_type_parity_resolved(Oid base, Oid elem, int32 typmod,
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
	return scalar_parity(base, typmod, t);
}

char *
dpwin_ch_type_parity(Oid typid, int32 typmod, const char *ch_type)
{
	char	   *error;
	ChType	   *t = dpwin_ch_type_parse(ch_type, &error);
	Oid			elem;
	Oid			base;

	if (t == NULL)
		return error;
	base = dpwin_ch_type_resolve_pg(typid, &typmod, &elem);
	return dpwin_ch_type_parity_resolved(base, elem, typmod, t);
}
