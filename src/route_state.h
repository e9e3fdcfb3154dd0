/*-------------------------------------------------------------------------
 *
 * route_state.h
 *	  The route's state (dpwin.route_state), which route_state.c owns.
 *
 *	  Callers must be inside a transaction with SPI connected.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_ROUTE_STATE_H
#define DPWIN_ROUTE_STATE_H

#include "datatype/timestamp.h"
#include "utils/uuid.h"

/* Advance route state by CAS; never moves it backwards. */
extern void dpwin_route_state_advance(int32 route_id, TimestampTz interval_end,
									  const pg_uuid_t *id, int32 target_id,
									  int64 epoch);

/* The route's last published interval_end; false when it has none. */
extern bool dpwin_route_state_last(int32 route_id, TimestampTz *interval_end);

#endif							/* DPWIN_ROUTE_STATE_H */
