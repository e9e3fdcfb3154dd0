/*-------------------------------------------------------------------------
 *
 * names.h
 *	  Deterministic names of the tables dpwin owns in ClickHouse (names.c),
 *	  derived from the route, the invocation, the chunk and the attempt, so
 *	  that recovery and clean-up can find every one of them from the journal
 *	  alone.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_NAMES_H
#define DPWIN_NAMES_H

#include "datatype/timestamp.h"
#include "utils/uuid.h"

/* All of an invocation's own tables start with this. */
extern char *dpwin_invocation_table_prefix(int32 route_id, const pg_uuid_t *id);
extern char *dpwin_staging_name(int32 route_id, const pg_uuid_t *id,
								int chunk_no, int attempt);
extern char *dpwin_generation_name(int32 route_id, const pg_uuid_t *id);

/* Backups of a route start with dpwin_backup_prefix(). */
extern char *dpwin_backup_prefix(int32 route_id);
extern char *dpwin_backup_name(int32 route_id, const pg_uuid_t *id,
							   TimestampTz interval_end);

#endif							/* DPWIN_NAMES_H */
