/*-------------------------------------------------------------------------
 *
 * evidence.h
 *	  Durable evidence of a publication (dpwin.evidence), which evidence.c
 *	  owns.
 *
 *	  Callers must be inside a transaction with SPI connected.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_EVIDENCE_H
#define DPWIN_EVIDENCE_H

#include "utils/uuid.h"

/*
 * Durable evidence: idempotent (a second write of the same invocation is a
 * no-op) and fenced; calls the route's evidence function, if any, in the
 * same transaction.  Returns false when the evidence already existed.
 */
extern bool dpwin_evidence_write(const pg_uuid_t *id, int32 route_id,
								 int32 target_id, int64 epoch,
								 const char *metrics_json,
								 Oid evidence_function);

/* The metrics of an invocation's evidence (jsonb text); NULL when none. */
extern char *dpwin_evidence_metrics(const pg_uuid_t *id);

#endif							/* DPWIN_EVIDENCE_H */
