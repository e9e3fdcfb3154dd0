/*-------------------------------------------------------------------------
 *
 * retention.h
 *	  The backups a route keeps, which retention.c owns: route.keep_backups
 *	  applied after each publication, and one backup per backfill
 *	  (docs/design.md, "Backfill, retention and health").
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_RETENTION_H
#define DPWIN_RETENTION_H

#include "nodes/pg_list.h"

#include "chclient.h"

/*
 * The backups of the route to drop now, from the journal alone
 * (dpwin.backups_to_drop()).  Needs a transaction with SPI connected; the
 * list is allocated in the caller's memory context at entry.
 */
extern List *dpwin_retention_plan(int32 route_id);

/* Drop those tables of the target's database (no transaction needed). */
extern void dpwin_retention_drop(ChClient *client, const char *database, List *tables);

/*
 * Journal that the route's backups of these names are dropped (needs a
 * transaction with SPI connected).
 */
extern void dpwin_retention_mark_dropped(int32 route_id, List *tables);

#endif							/* DPWIN_RETENTION_H */
