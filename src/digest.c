/*-------------------------------------------------------------------------
 *
 * digest.c
 *	  Typed multiset digest over RowBinary rows: the row count and two sums
 *	  (modulo 2^64) of keyed SipHash-2-4 values of each row's bytes.
 *
 *	  Sums are independent of row order and keep multiplicity, so the
 *	  digest of a chunk can be computed while encoding and compared with
 *	  the one ClickHouse computes over the staged rows:
 *
 *		count(),
 *		sum(sipHash64Keyed((toUInt64(k0), toUInt64(k1)), formatRow('RowBinary', cols...))),
 *		sum(sipHash64Keyed((toUInt64(k2), toUInt64(k3)), formatRow('RowBinary', cols...)))
 *
 *	  ClickHouse's sipHash64Keyed of a String is reference SipHash-2-4 under
 *	  that key (DESIGN.md §4).  formatRowNoNewline must not be used: it
 *	  strips a trailing 0x0A byte.
 *
 *	  No I/O.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "port/pg_bswap.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "digest.h"

/* ----------------------------------------------------------------
 * SipHash-2-4 (Aumasson & Bernstein), 64-bit output
 * ----------------------------------------------------------------
 */

#define ROTL64(x, b)	(((x) << (b)) | ((x) >> (64 - (b))))

#define SIPROUND(v0, v1, v2, v3) \
	do { \
		(v0) += (v1); (v1) = ROTL64((v1), 13); (v1) ^= (v0); (v0) = ROTL64((v0), 32); \
		(v2) += (v3); (v3) = ROTL64((v3), 16); (v3) ^= (v2); \
		(v0) += (v3); (v3) = ROTL64((v3), 21); (v3) ^= (v0); \
		(v2) += (v1); (v1) = ROTL64((v1), 17); (v1) ^= (v2); (v2) = ROTL64((v2), 32); \
	} while (0)

static inline uint64
load_le64(const unsigned char *p)
{
	uint64		v;

	memcpy(&v, p, sizeof(v));
#ifdef WORDS_BIGENDIAN
	v = pg_bswap64(v);
#endif
	return v;
}

uint64
dpwin_siphash24(uint64 k0, uint64 k1, const void *data, size_t len)
{
	const unsigned char *p = (const unsigned char *) data;
	const unsigned char *end = p + (len & ~((size_t) 7));
	uint64		v0 = k0 ^ UINT64CONST(0x736f6d6570736575);
	uint64		v1 = k1 ^ UINT64CONST(0x646f72616e646f6d);
	uint64		v2 = k0 ^ UINT64CONST(0x6c7967656e657261);
	uint64		v3 = k1 ^ UINT64CONST(0x7465646279746573);
	uint64		m;
	int			left = (int) (len & 7);

	/* compression: one message word of 8 little-endian bytes at a time */
	for (; p != end; p += 8)
	{
		m = load_le64(p);
		v3 ^= m;
		SIPROUND(v0, v1, v2, v3);
		SIPROUND(v0, v1, v2, v3);
		v0 ^= m;
	}

	/* the last word: remaining bytes, with len mod 256 in the top byte */
	m = ((uint64) len) << 56;
	for (int i = left - 1; i >= 0; i--)
		m |= ((uint64) p[i]) << (8 * i);
	v3 ^= m;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	v0 ^= m;

	/* finalization */
	v2 ^= 0xff;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

/* ----------------------------------------------------------------
 * The multiset digest
 * ----------------------------------------------------------------
 */

void
dpwin_digest_add_row(DpwinDigest *d, const DpwinDigestKey *key,
					 const void *row, size_t len)
{
	/* unsigned arithmetic wraps modulo 2^64, as ClickHouse's sum(UInt64) */
	d->count++;
	d->sum1 += dpwin_siphash24(key->k1[0], key->k1[1], row, len);
	d->sum2 += dpwin_siphash24(key->k2[0], key->k2[1], row, len);
}

void
dpwin_digest_merge(DpwinDigest *into, const DpwinDigest *from)
{
	into->count += from->count;
	into->sum1 += from->sum1;
	into->sum2 += from->sum2;
}

bool
dpwin_digest_equal(const DpwinDigest *a, const DpwinDigest *b)
{
	return a->count == b->count && a->sum1 == b->sum1 && a->sum2 == b->sum2;
}

/*
 * Parse one unsigned 64-bit decimal number at *pp (digits only, no sign,
 * no leading blanks, no overflow); advance *pp past it.
 */
static bool
parse_u64(const char **pp, uint64 *out)
{
	const char *p = *pp;
	uint64		v = 0;

	if (*p < '0' || *p > '9')
		return false;
	while (*p >= '0' && *p <= '9')
	{
		uint64		digit = (uint64) (*p - '0');

		if (v > (PG_UINT64_MAX - digit) / 10)
			return false;
		v = v * 10 + digit;
		p++;
	}
	*pp = p;
	*out = v;
	return true;
}

/* n numbers separated by sep; then optionally a line end; then the end */
static bool
parse_u64_list(const char *text, char sep, int n, uint64 *out, bool allow_eol)
{
	const char *p = text;

	if (text == NULL)
		return false;
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
		{
			if (*p != sep)
				return false;
			p++;
		}
		if (!parse_u64(&p, &out[i]))
			return false;
	}
	if (allow_eol)
	{
		if (*p == '\r')
			p++;
		if (*p == '\n')
			p++;
	}
	return *p == '\0';
}

char *
dpwin_digest_to_text(const DpwinDigest *d)
{
	return psprintf(UINT64_FORMAT ":" UINT64_FORMAT ":" UINT64_FORMAT,
					d->count, d->sum1, d->sum2);
}

bool
dpwin_digest_from_text(const char *text, DpwinDigest *d)
{
	uint64		v[3];

	if (!parse_u64_list(text, ':', 3, v, false))
		return false;
	d->count = v[0];
	d->sum1 = v[1];
	d->sum2 = v[2];
	return true;
}

void
dpwin_digest_key_generate(DpwinDigestKey *key)
{
	uint64		k[4];

	if (!pg_strong_random(k, sizeof(k)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random digest key")));
	key->k1[0] = k[0];
	key->k1[1] = k[1];
	key->k2[0] = k[2];
	key->k2[1] = k[3];
}

/* "k1[0]:k1[1]:k2[0]:k2[1]", decimal, as ClickHouse's toUInt64() reads them */
char *
dpwin_digest_key_to_text(const DpwinDigestKey *key)
{
	return psprintf(UINT64_FORMAT ":" UINT64_FORMAT ":" UINT64_FORMAT ":" UINT64_FORMAT,
					key->k1[0], key->k1[1], key->k2[0], key->k2[1]);
}

bool
dpwin_digest_key_from_text(const char *text, DpwinDigestKey *key)
{
	uint64		v[4];

	if (!parse_u64_list(text, ':', 4, v, false))
		return false;
	key->k1[0] = v[0];
	key->k1[1] = v[1];
	key->k2[0] = v[2];
	key->k2[1] = v[3];
	return true;
}

/*
 * formatRow must get the columns themselves: RowBinary of LowCardinality
 * and Nullable columns is what the loader sent, so the hash covers the
 * same bytes.
 */
char *
dpwin_digest_ch_select_list(const DpwinDigestKey *key, const char *quoted_columns)
{
	return psprintf("count(), "
					"sum(sipHash64Keyed((toUInt64(" UINT64_FORMAT "), toUInt64(" UINT64_FORMAT ")), "
					"formatRow('RowBinary', %s))), "
					"sum(sipHash64Keyed((toUInt64(" UINT64_FORMAT "), toUInt64(" UINT64_FORMAT ")), "
					"formatRow('RowBinary', %s)))",
					key->k1[0], key->k1[1], quoted_columns,
					key->k2[0], key->k2[1], quoted_columns);
}

/* One TabSeparated line "count\tsum1\tsum2", with or without its newline. */
bool
dpwin_digest_from_tsv(const char *line, DpwinDigest *d)
{
	uint64		v[3];

	if (!parse_u64_list(line, '\t', 3, v, true))
		return false;
	d->count = v[0];
	d->sum1 = v[1];
	d->sum2 = v[2];
	return true;
}

/* ----------------------------------------------------------------
 * Test-only SQL function (sql/install/90_testing.sql)
 * ----------------------------------------------------------------
 */

PG_FUNCTION_INFO_V1(dpwin__siphash24);

/*
 * dpwin._siphash24(k0 bigint, k1 bigint, data bytea) -> bigint: the uint64
 * result as its two's complement, like the keys.
 */
Datum
dpwin__siphash24(PG_FUNCTION_ARGS)
{
	uint64		k0 = (uint64) PG_GETARG_INT64(0);
	uint64		k1 = (uint64) PG_GETARG_INT64(1);
	bytea	   *data = PG_GETARG_BYTEA_PP(2);

	PG_RETURN_INT64((int64) dpwin_siphash24(k0, k1, VARDATA_ANY(data),
											VARSIZE_ANY_EXHDR(data)));
}

PG_FUNCTION_INFO_V1(dpwin__digest_rows);
PG_FUNCTION_INFO_V1(dpwin__digest_ch_select_list);

static void
digest_key_arg(text *t, DpwinDigestKey *key)
{
	char	   *s = text_to_cstring(t);

	if (!dpwin_digest_key_from_text(s, key))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid digest key \"%s\"", s),
				 errhint("A digest key is four unsigned 64-bit decimal numbers separated by colons.")));
}

/*
 * dpwin._digest_rows(key text, rows bytea[]) -> text: the digest of the
 * given RowBinary rows (NULL elements skipped) as "count:sum1:sum2".
 */
Datum
dpwin__digest_rows(PG_FUNCTION_ARGS)
{
	DpwinDigestKey key;
	DpwinDigest d = DPWIN_DIGEST_INIT;
	DpwinDigest back;
	ArrayType  *rows = PG_GETARG_ARRAYTYPE_P(1);
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	char	   *result;

	digest_key_arg(PG_GETARG_TEXT_PP(0), &key);
	deconstruct_array(rows, BYTEAOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		bytea	   *row;

		if (nulls[i])
			continue;
		row = DatumGetByteaPP(elems[i]);
		dpwin_digest_add_row(&d, &key, VARDATA_ANY(row), VARSIZE_ANY_EXHDR(row));
	}
	result = dpwin_digest_to_text(&d);
	/* the text form must read back to the same digest */
	if (!dpwin_digest_from_text(result, &back) || !dpwin_digest_equal(&d, &back))
		elog(ERROR, "digest text form \"%s\" does not read back", result);
	PG_RETURN_TEXT_P(cstring_to_text(result));
}

/* dpwin._digest_ch_select_list(key text, quoted_columns text) -> text */
Datum
dpwin__digest_ch_select_list(PG_FUNCTION_ARGS)
{
	DpwinDigestKey key;

	digest_key_arg(PG_GETARG_TEXT_PP(0), &key);
	PG_RETURN_TEXT_P(cstring_to_text(
									 dpwin_digest_ch_select_list(&key,
																 text_to_cstring(PG_GETARG_TEXT_PP(1)))));
}
