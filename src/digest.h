/*-------------------------------------------------------------------------
 *
 * digest.h
 *	  Typed multiset digest (digest.c): the row count and two sums of keyed SipHash-2-4
 *	  values over the RowBinary bytes of each row (docs/design.md, "Why this
 *	  is exact").  ClickHouse computes the same value with formatRow(
 *	  'RowBinary', ...) and its reference SipHash, so the two sides can be
 *	  compared without moving rows.
 *
 *	  No I/O.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_DIGEST_H
#define DPWIN_DIGEST_H

#include "c.h"

/*
 * Which function a digest's sums are of.  A key names its scheme, and an
 * invocation journals its key, so that a digest is only ever compared with
 * one of the same function: a recovered invocation or a cached
 * publication keeps the scheme it was digested under.
 */
typedef enum DpwinDigestScheme
{
	/* the sums of SipHash-2-4-64 under two keys (dpwin 0.1) */
	DPWIN_DIGEST_SIP64_PAIR = 1,
	/* the sums of the two halves of SipHash-2-4-128 under one key */
	DPWIN_DIGEST_SIP128 = 2,
} DpwinDigestScheme;

/* the scheme of every new key */
#define DPWIN_DIGEST_SCHEME_CURRENT DPWIN_DIGEST_SIP128

typedef struct DpwinDigestKey
{
	DpwinDigestScheme scheme;
	uint64		k1[2];			/* SipHash key (of the first sum) */
	uint64		k2[2];			/* of the second sum; SIP64_PAIR only */
} DpwinDigestKey;

typedef struct DpwinDigest
{
	uint64		count;
	uint64		sum1;			/* modulo 2^64, as ClickHouse's sum(UInt64) */
	uint64		sum2;
} DpwinDigest;

#define DPWIN_DIGEST_INIT {0, 0, 0}

/* Add one row (its RowBinary bytes) to the digest. */
extern PGDLLEXPORT void dpwin_digest_add_row(DpwinDigest *d, const DpwinDigestKey *key,
											 const void *row, size_t len);

/* into += from (multiset union). */
extern void dpwin_digest_merge(DpwinDigest *into, const DpwinDigest *from);

extern PGDLLEXPORT bool dpwin_digest_equal(const DpwinDigest *a, const DpwinDigest *b);

/* "count:sum1:sum2" in decimal, and back (false on malformed text). */
extern PGDLLEXPORT char *dpwin_digest_to_text(const DpwinDigest *d);
extern PGDLLEXPORT bool dpwin_digest_from_text(const char *text, DpwinDigest *d);

/*
 * A fresh random key of the current scheme (pg_strong_random); ereports if
 * there is no randomness.  A key's text names its scheme: "sip128:k0:k1",
 * or four numbers for SIP64_PAIR.
 */
extern void dpwin_digest_key_generate(DpwinDigestKey *key);
extern char *dpwin_digest_key_to_text(const DpwinDigestKey *key);
extern PGDLLEXPORT bool dpwin_digest_key_from_text(const char *text, DpwinDigestKey *key);

/*
 * The ClickHouse select-list that computes the digest of a table under
 * key: "count(), sum(...), sum(...)" over formatRow('RowBinary',
 * <columns>), in the key's scheme.  quoted_columns is the target's
 * column list in target order, already quoted for ClickHouse and separated
 * by ", ".  The result of such a SELECT in TabSeparated parses with
 * dpwin_digest_from_tsv().
 */
extern PGDLLEXPORT char *dpwin_digest_ch_select_list(const DpwinDigestKey *key,
													 const char *quoted_columns);
extern bool dpwin_digest_from_tsv(const char *line, DpwinDigest *d);

/* SHA-256 of data as 64 lower-case hex digits (fingerprints, plans). */
extern char *dpwin_sha256_hex(const char *data, size_t len);

#endif							/* DPWIN_DIGEST_H */
