/*-------------------------------------------------------------------------
 *
 * publication.h
 *	  Publication intents and outcomes (dpwin.publication), which
 *	  publication.c owns.
 *
 *	  Callers must be inside a transaction with SPI connected.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_PUBLICATION_H
#define DPWIN_PUBLICATION_H

#include "nodes/pg_list.h"
#include "utils/uuid.h"

/*
 * What the tables' UUIDs say about an exchange (docs/design.md, "The
 * state machine").  PENDING is never journaled: the reply was lost, the
 * target still has its old UUID, and the server cannot show that the
 * statement has ended.
 */
typedef enum DpwinOutcome
{
	DPWIN_OUTCOME_NONE,			/* intent without outcome */
	DPWIN_OUTCOME_PUBLISHED,
	DPWIN_OUTCOME_NOT_PUBLISHED,
	DPWIN_OUTCOME_UNKNOWN,
	DPWIN_OUTCOME_PENDING
} DpwinOutcome;

/* A publication intent, and what is known of its outcome. */
typedef struct DpwinPublication
{
	char	   *target_uuid_before;
	char	   *generation_table;
	char	   *generation_uuid;
	char	   *backup_table;
	DpwinOutcome outcome;		/* NONE while unsettled */
	char	   *exchange_query_id;	/* of the last EXCHANGE sent, if any */
	int64		lease_epoch;
} DpwinPublication;

extern const char *dpwin_publication_outcome_name(DpwinOutcome outcome);

/* Publication intent and outcome. */
extern void dpwin_publication_intent(const pg_uuid_t *id, int32 target_id,
									 int64 epoch,
									 const DpwinPublication *pub,
									 const char *exchange_query_id);
extern DpwinPublication *dpwin_publication_load(const pg_uuid_t *id);

/*
 * The one verdict on an exchange, from the UUIDs of the target and of the
 * generation table now (NULL: missing): published when the target has the
 * generation's UUID; not published when both still have their own;
 * unknown otherwise.
 */
extern DpwinOutcome dpwin_publication_judge(const DpwinPublication *pub,
											const char *target_uuid,
											const char *generation_uuid);
extern void dpwin_publication_outcome(const pg_uuid_t *id, int32 target_id,
									  int64 epoch, DpwinOutcome outcome);

/* The backups a route's publications kept, newest first. */
extern List *dpwin_publication_backups(int32 route_id);

#endif							/* DPWIN_PUBLICATION_H */
