/*-------------------------------------------------------------------------
 *
 * names.c
 *	  Names of dpwin's ClickHouse tables.
 *
 *	  They use only [a-z0-9_], start with "_dpwin_" and carry the route id
 *	  and the first 12 hex digits of the invocation id (48 bits: collisions
 *	  between invocations of one route are not a practical concern, and the
 *	  journal records every name anyway).
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "pgtime.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"

#include "names.h"

static char *
uuid_short(const pg_uuid_t *id)
{
	static const char hex[] = "0123456789abcdef";
	char	   *s = palloc(13);

	for (int i = 0; i < 6; i++)
	{
		s[2 * i] = hex[id->data[i] >> 4];
		s[2 * i + 1] = hex[id->data[i] & 0x0f];
	}
	s[12] = '\0';
	return s;
}

char *
dpwin_invocation_table_prefix(int32 route_id, const pg_uuid_t *id)
{
	return psprintf("_dpwin_%d_%s_", route_id, uuid_short(id));
}

char *
dpwin_staging_name(int32 route_id, const pg_uuid_t *id, int chunk_no,
				   int attempt)
{
	return psprintf("%sstg_%d_%d", dpwin_invocation_table_prefix(route_id, id),
					chunk_no, attempt);
}

char *
dpwin_generation_name(int32 route_id, const pg_uuid_t *id)
{
	return psprintf("%sgen", dpwin_invocation_table_prefix(route_id, id));
}

char *
dpwin_backup_prefix(int32 route_id)
{
	return psprintf("_dpwin_backup_%d_", route_id);
}

char *
dpwin_backup_name(int32 route_id, const pg_uuid_t *id, TimestampTz interval_end)
{
	struct pg_tm tm;
	fsec_t		fsec;

	if (timestamp2tm(interval_end, NULL, &tm, &fsec, NULL, NULL) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("interval_end out of range")));
	return psprintf("%s%04d%02d%02dt%02d%02d%02d_%s", dpwin_backup_prefix(route_id),
					tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min,
					tm.tm_sec, uuid_short(id));
}
