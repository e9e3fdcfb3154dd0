/*-------------------------------------------------------------------------
 *
 * route_state.c
 *	  The route's state (dpwin.route_state): the end of the last interval
 *	  its refreshes completed, advanced by compare-and-swap, never back.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "lease.h"
#include "route_state.h"

void
dpwin_route_state_advance(int32 route_id, TimestampTz interval_end,
						  const pg_uuid_t *id, int32 target_id, int64 epoch)
{
	Oid			types[3] = {INT4OID, TIMESTAMPTZOID, UUIDOID};
	Datum		args[3];

	dpwin_lease_check_epoch(target_id, epoch);
	args[0] = Int32GetDatum(route_id);
	args[1] = TimestampTzGetDatum(interval_end);
	args[2] = UUIDPGetDatum(dpwin_uuid_copy(id));

	/* Never backwards: an older window refreshed later leaves it alone. */
	dpwin_catalog_exec("INSERT INTO dpwin.route_state (route_id, last_interval_end, invocation_id)"
					   " VALUES ($1, $2, $3)"
					   " ON CONFLICT (route_id) DO UPDATE SET"
					   "   last_interval_end = EXCLUDED.last_interval_end,"
					   "   invocation_id = EXCLUDED.invocation_id,"
					   "   updated_at = clock_timestamp()"
					   " WHERE dpwin.route_state.last_interval_end < EXCLUDED.last_interval_end",
					   3, types, args, NULL, false);
}

bool
dpwin_route_state_last(int32 route_id, TimestampTz *interval_end)
{
	Oid			types[1] = {INT4OID};
	Datum		args[1];

	args[0] = Int32GetDatum(route_id);
	if (dpwin_catalog_exec("SELECT last_interval_end FROM dpwin.route_state"
						   " WHERE route_id = $1",
						   1, types, args, NULL, false) != 1)
		return false;
	*interval_end = dpwin_catalog_timestamptz(0, 1);
	return true;
}
