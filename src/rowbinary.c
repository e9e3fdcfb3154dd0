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
 *	  A NULL is written only into a Nullable ClickHouse type; anywhere else
 *	  it fails the row with 22004, whether or not the PostgreSQL column is
 *	  NOT NULL, as admission leaves nullability to this check.
 *
 *	  RowBinary is little-endian; docs/types.md has the map.
 *
 *	  No I/O.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/tupmacs.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "port/pg_bswap.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/datetime.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "chtype.h"
#include "pg_compat.h"
#include "rowbinary.h"

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

/*
 * Room for n more bytes and the terminating zero.  The test is
 * enlargeStringInfo's own, made here so that the common case (the request
 * body already has room) costs no call: a row makes one of these for each
 * column (docs/design.md, "Extraction").
 */
static inline void
rb_room(StringInfo out, int n)
{
	if (unlikely((Size) n >= (Size) (out->maxlen - out->len)))
		enlargeStringInfo(out, n);
}

static inline char *
rb_reserve(StringInfo out, int n)
{
	char	   *p;

	rb_room(out, n);
	p = out->data + out->len;
	out->len += n;
	out->data[out->len] = '\0';
	return p;
}

static inline void
rb_put_byte(StringInfo out, uint8 b)
{
	rb_room(out, 1);
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

pg_noreturn static void
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

/*
 * A NULL where the ClickHouse type has none: a NULL element of an Array(T),
 * a NULL array (ClickHouse has no Nullable(Array(...))), or a NULL scalar
 * for a type that is not Nullable.  No retry can help, so 22004.
 */
pg_noreturn static void
rb_null_error(RbEncoder *enc, const RbCol *col, bool element)
{
	if (element)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("array column \"%s\" holds a NULL element but ClickHouse type %s has no Nullable elements",
						col->name, col->ch->text),
				 rb_row_detail(enc),
				 errhint("Use Array(Nullable(...)) on the ClickHouse side.")));
	if (col->elem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("column \"%s\" is NULL but ClickHouse type %s is not Nullable",
						col->name, col->ch->text),
				 rb_row_detail(enc),
				 errhint("ClickHouse has no Nullable arrays: store an empty array instead of NULL, and declare the PostgreSQL column NOT NULL.")));
	ereport(ERROR,
			(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			 errmsg("column \"%s\" is NULL but ClickHouse type %s is not Nullable",
					col->name, col->ch->text),
			 rb_row_detail(enc),
			 errhint("Declare the ClickHouse column Nullable(%s) to copy NULLs, or remove them from the source and declare the PostgreSQL column NOT NULL.",
					 col->ch->text)));
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
	float8		f = (float8) DatumGetFloat4(value); /* exact */
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
	us = ts + RB_PG_TO_UNIX_US; /* cannot overflow for finite values */
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
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("corrupt numeric value of %zu bytes", len)));
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
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("corrupt numeric value of %zu bytes", len)));
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
		uint8	   *bitmap = ARR_NULLBITMAP(arr);
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
dpwin_rb_encoder_create(int ncols, char *const *names, const Oid *typids,
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
		Oid			base = dpwin_ch_type_resolve_pg(typids[i], &typmod, &elem);
		char	   *error;
		ChType	   *t = dpwin_ch_type_parse(ch_types[i], &error);

		c->name = pstrdup(names[i]);
		if (t != NULL)
			error = dpwin_ch_type_parity_resolved(base, elem, typmod, t);
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
dpwin_rb_encode_row(RbEncoder *enc, const Datum *values, const bool *isnull,
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
