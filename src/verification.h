/*-------------------------------------------------------------------------
 *
 * verification.h
 *	  The verification journal (dpwin.verification), which
 *	  verification.c owns.
 *
 *	  Callers must be inside a transaction with SPI connected.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_VERIFICATION_H
#define DPWIN_VERIFICATION_H

#include "access/tupdesc.h"
#include "datatype/timestamp.h"
#include "utils/tuplestore.h"
#include "utils/uuid.h"

/* A verification, as dpwin.verification records it. */
typedef struct DpwinVerification
{
	pg_uuid_t	id;
	int32		route_id;
	TimestampTz interval_end;
	TimestampTz window_lo;
	TimestampTz window_hi;
	const char *snapshot_id;
	const char *target_uuid;
	const char *chunks_json;	/* jsonb text */
	int32		drifting_chunks;
	Oid			caller_role;
	TimestampTz started_at;
} DpwinVerification;

/* Journal a verification (no lease: it changes nothing it fences). */
extern void dpwin_verification_record(const DpwinVerification *v);

/*
 * The (chunk_no, lo, hi, source_rows, target_rows, matches) rows of a
 * verification.
 */
extern void dpwin_verification_chunks(const pg_uuid_t *id,
									  Tuplestorestate *tupstore, TupleDesc desc);

#endif							/* DPWIN_VERIFICATION_H */
