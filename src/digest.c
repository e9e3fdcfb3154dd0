/*-------------------------------------------------------------------------
 *
 * digest.c
 *	  Typed multiset digest over RowBinary rows: the row count and two sums
 *	  (modulo 2^64) of keyed SipHash-2-4 values of each row's bytes.
 *
 *	  Sums are independent of row order and keep multiplicity, so the
 *	  digest of a chunk can be computed while encoding and compared with
 *	  the one ClickHouse computes over the staged rows.  With h the
 *	  128-bit SipHash of a row, R = formatRow('RowBinary', cols...):
 *
 *		count(),
 *		sum(reinterpretAsUInt64(sipHash128ReferenceKeyed((toUInt64(k0), toUInt64(k1)), R))),
 *		sum(reinterpretAsUInt64(substring(sipHash128ReferenceKeyed(...), 9, 8)))
 *
 *	  the sums of h's two halves; keys of dpwin 0.1 name the older scheme,
 *	  two 64-bit SipHashes (sipHash64Keyed) under two keys.  Both ClickHouse
 *	  functions are the reference algorithms on a String (docs/design.md,
 *	  "Why this is exact").  formatRowNoNewline must not be used: it strips
 *	  a trailing 0x0A byte.
 *
 *	  No I/O.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "common/sha2.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "port/pg_bswap.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/resowner.h"

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

/*
 * SipHash-2-4 of the same bytes under two keys, in one pass.  A row is
 * hashed under both keys of the digest; SipHash is a chain of dependent
 * additions and rotations, so two independent chains side by side keep
 * the CPU busy where one leaves it waiting, and the message words are
 * loaded once.  Both lanes are the reference algorithm: (ka, *ha) and
 * (kb, *hb) never mix.
 */
static inline void
siphash24_pair(const uint64 ka[2], const uint64 kb[2],
			   const unsigned char *p, size_t len, uint64 *ha, uint64 *hb)
{
	const unsigned char *end = p + (len & ~((size_t) 7));
	uint64		a0 = ka[0] ^ UINT64CONST(0x736f6d6570736575);
	uint64		a1 = ka[1] ^ UINT64CONST(0x646f72616e646f6d);
	uint64		a2 = ka[0] ^ UINT64CONST(0x6c7967656e657261);
	uint64		a3 = ka[1] ^ UINT64CONST(0x7465646279746573);
	uint64		b0 = kb[0] ^ UINT64CONST(0x736f6d6570736575);
	uint64		b1 = kb[1] ^ UINT64CONST(0x646f72616e646f6d);
	uint64		b2 = kb[0] ^ UINT64CONST(0x6c7967656e657261);
	uint64		b3 = kb[1] ^ UINT64CONST(0x7465646279746573);
	uint64		m;
	int			left = (int) (len & 7);

	/* compression: one message word of 8 little-endian bytes at a time */
	for (; p != end; p += 8)
	{
		m = load_le64(p);
		a3 ^= m;
		b3 ^= m;
		SIPROUND(a0, a1, a2, a3);
		SIPROUND(b0, b1, b2, b3);
		SIPROUND(a0, a1, a2, a3);
		SIPROUND(b0, b1, b2, b3);
		a0 ^= m;
		b0 ^= m;
	}

	/* the last word: remaining bytes, with len mod 256 in the top byte */
	m = ((uint64) len) << 56;
	for (int i = left - 1; i >= 0; i--)
		m |= ((uint64) p[i]) << (8 * i);
	a3 ^= m;
	b3 ^= m;
	SIPROUND(a0, a1, a2, a3);
	SIPROUND(b0, b1, b2, b3);
	SIPROUND(a0, a1, a2, a3);
	SIPROUND(b0, b1, b2, b3);
	a0 ^= m;
	b0 ^= m;

	/* finalization */
	a2 ^= 0xff;
	b2 ^= 0xff;
	for (int r = 0; r < 4; r++)
	{
		SIPROUND(a0, a1, a2, a3);
		SIPROUND(b0, b1, b2, b3);
	}
	*ha = a0 ^ a1 ^ a2 ^ a3;
	*hb = b0 ^ b1 ^ b2 ^ b3;
}

/*
 * Reference SipHash-2-4 with its 128-bit output, one lane: one pass over
 * the row where the pair above makes two, and the two halves of its
 * output are as independent as two keys' values (docs/design.md, "Why
 * this is exact").
 */
static inline void
siphash24_128(const uint64 k[2], const unsigned char *p, size_t len, uint64 out[2])
{
	const unsigned char *end = p + (len & ~((size_t) 7));
	uint64		v0 = k[0] ^ UINT64CONST(0x736f6d6570736575);
	uint64		v1 = k[1] ^ UINT64CONST(0x646f72616e646f6d) ^ 0xee;
	uint64		v2 = k[0] ^ UINT64CONST(0x6c7967656e657261);
	uint64		v3 = k[1] ^ UINT64CONST(0x7465646279746573);
	uint64		m;
	int			left = (int) (len & 7);

	for (; p != end; p += 8)
	{
		m = load_le64(p);
		v3 ^= m;
		SIPROUND(v0, v1, v2, v3);
		SIPROUND(v0, v1, v2, v3);
		v0 ^= m;
	}

	m = ((uint64) len) << 56;
	for (int i = left - 1; i >= 0; i--)
		m |= ((uint64) p[i]) << (8 * i);
	v3 ^= m;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	v0 ^= m;

	/* finalization: one half, then the other */
	v2 ^= 0xee;
	for (int r = 0; r < 4; r++)
		SIPROUND(v0, v1, v2, v3);
	out[0] = v0 ^ v1 ^ v2 ^ v3;
	v1 ^= 0xdd;
	for (int r = 0; r < 4; r++)
		SIPROUND(v0, v1, v2, v3);
	out[1] = v0 ^ v1 ^ v2 ^ v3;
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
	uint64		h[2];

	if (likely(key->scheme == DPWIN_DIGEST_SIP128))
		siphash24_128(key->k1, (const unsigned char *) row, len, h);
	else
		siphash24_pair(key->k1, key->k2, (const unsigned char *) row, len, &h[0], &h[1]);
	d->count++;
	d->sum1 += h[0];
	d->sum2 += h[1];
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

/* Three unsigned numbers separated by sep: count, sum1, sum2. */
static bool
digest_parse(const char *text, char sep, bool newline, DpwinDigest *d)
{
	uint64		v[3];

	if (!parse_u64_list(text, sep, 3, v, newline))
		return false;
	d->count = v[0];
	d->sum1 = v[1];
	d->sum2 = v[2];
	return true;
}

bool
dpwin_digest_from_text(const char *text, DpwinDigest *d)
{
	return digest_parse(text, ':', false, d);
}

void
dpwin_digest_key_generate(DpwinDigestKey *key)
{
	uint64		k[4];

	if (!pg_strong_random(k, sizeof(k)))
		elog(ERROR, "could not generate a random digest key");
	memset(key, 0, sizeof(*key));
	key->scheme = DPWIN_DIGEST_SCHEME_CURRENT;
	key->k1[0] = k[0];
	key->k1[1] = k[1];
	if (key->scheme == DPWIN_DIGEST_SIP64_PAIR)
	{
		key->k2[0] = k[2];
		key->k2[1] = k[3];
	}
}

#define SIP128_KEY_PREFIX "sip128:"

/*
 * "sip128:k0:k1", or "k1[0]:k1[1]:k2[0]:k2[1]" for the pair, in decimal as
 * ClickHouse's toUInt64() reads them.
 */
char *
dpwin_digest_key_to_text(const DpwinDigestKey *key)
{
	if (key->scheme == DPWIN_DIGEST_SIP128)
		return psprintf(SIP128_KEY_PREFIX UINT64_FORMAT ":" UINT64_FORMAT,
						key->k1[0], key->k1[1]);
	return psprintf(UINT64_FORMAT ":" UINT64_FORMAT ":" UINT64_FORMAT ":" UINT64_FORMAT,
					key->k1[0], key->k1[1], key->k2[0], key->k2[1]);
}

bool
dpwin_digest_key_from_text(const char *text, DpwinDigestKey *key)
{
	uint64		v[4];

	memset(key, 0, sizeof(*key));
	if (text != NULL && strncmp(text, SIP128_KEY_PREFIX, strlen(SIP128_KEY_PREFIX)) == 0)
	{
		if (!parse_u64_list(text + strlen(SIP128_KEY_PREFIX), ':', 2, v, false))
			return false;
		key->scheme = DPWIN_DIGEST_SIP128;
		key->k1[0] = v[0];
		key->k1[1] = v[1];
		return true;
	}
	if (!parse_u64_list(text, ':', 4, v, false))
		return false;
	key->scheme = DPWIN_DIGEST_SIP64_PAIR;
	key->k1[0] = v[0];
	key->k1[1] = v[1];
	key->k2[0] = v[2];
	key->k2[1] = v[3];
	return true;
}

/*
 * formatRow must get the columns themselves: RowBinary of LowCardinality
 * and Nullable columns is what the loader sent, so the hash covers the
 * same bytes.  The 128-bit hash is written twice, once for each half: the
 * server computes an expression that occurs twice once.  Its FixedString
 * holds the reference output's bytes, so reinterpretAsUInt64() of its
 * first and of its last eight bytes are the halves siphash24_128() gives.
 */
char *
dpwin_digest_ch_select_list(const DpwinDigestKey *key, const char *quoted_columns)
{
	if (key->scheme == DPWIN_DIGEST_SIP128)
	{
		char	   *h = psprintf("sipHash128ReferenceKeyed((toUInt64(" UINT64_FORMAT "), toUInt64("
								 UINT64_FORMAT ")), formatRow('RowBinary', %s))",
								 key->k1[0], key->k1[1], quoted_columns);

		return psprintf("count(), sum(reinterpretAsUInt64(%s)), "
						"sum(reinterpretAsUInt64(substring(%s, 9, 8)))", h, h);
	}
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
	return digest_parse(line, '\t', true, d);
}

char *
dpwin_sha256_hex(const char *data, size_t len)
{
	ResourceOwner saved = CurrentResourceOwner;
	ResourceOwner own = NULL;
	pg_cryptohash_ctx *ctx;
	uint8		hash[PG_SHA256_DIGEST_LENGTH];
	char	   *hex;

	/*
	 * A hash context belongs to a resource owner; a coordinator between its
	 * transactions has none, and lends it one of its own meanwhile.
	 */
	if (saved == NULL)
		CurrentResourceOwner = own = ResourceOwnerCreate(NULL, "dpwin sha-256");
	ctx = pg_cryptohash_create(PG_SHA256);
	if (ctx == NULL ||
		pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) data, len) < 0 ||
		pg_cryptohash_final(ctx, hash, sizeof(hash)) < 0)
	{
		CurrentResourceOwner = saved;
		elog(ERROR, "could not compute SHA-256: %s",
			 ctx ? pg_cryptohash_error(ctx) : "out of memory");
	}
	pg_cryptohash_free(ctx);
	if (own != NULL)
	{
		CurrentResourceOwner = saved;
		ResourceOwnerRelease(own, RESOURCE_RELEASE_BEFORE_LOCKS, true, true);
		ResourceOwnerRelease(own, RESOURCE_RELEASE_LOCKS, true, true);
		ResourceOwnerRelease(own, RESOURCE_RELEASE_AFTER_LOCKS, true, true);
		ResourceOwnerDelete(own);
	}
	hex = palloc(PG_SHA256_DIGEST_LENGTH * 2 + 1);
	hex_encode((const char *) hash, sizeof(hash), hex);
	hex[PG_SHA256_DIGEST_LENGTH * 2] = '\0';
	return hex;
}
