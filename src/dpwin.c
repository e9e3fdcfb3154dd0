/*-------------------------------------------------------------------------
 *
 * dpwin.c
 *	  Module entry point: _PG_init and every dpwin.* GUC, and the few
 *	  general helpers that every part of dpwin shares (dpwin.h).
 *
 *	  dpwin owns shared memory (the progress table of running invocations,
 *	  progress.c) and launches background workers, so it must be loaded
 *	  through shared_preload_libraries.  No I/O happens here.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "learned.h"
#include "progress.h"
#include "utils/builtins.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

int			dpwin_max_workers = 8;
int			dpwin_lease_timeout_ms = 0;
int			dpwin_retry_backoff_ms = 500;
int			dpwin_max_invocations = 16;

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dpwin must be loaded via shared_preload_libraries"),
				 errdetail("dpwin owns shared memory and launches background workers, which is only possible when the library is loaded at server start."),
				 errhint("Add dpwin to shared_preload_libraries in postgresql.conf and restart the server.")));

	DefineCustomIntVariable("dpwin.max_workers",
							"Maximum number of chunk workers one invocation may run at once.",
							"A route's parallelism is capped by this value and by free background worker slots.",
							&dpwin_max_workers,
							8, 1, DPWIN_MAX_PARALLELISM,
							PGC_SUSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dpwin.lease_timeout",
							"How long a refresh waits for the target's lease before failing.",
							"0 fails at once when another invocation holds the lease.",
							&dpwin_lease_timeout_ms,
							0, 0, 3600 * 1000,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dpwin.retry_backoff",
							"Base delay before retrying a chunk after a transient failure.",
							"The second retry waits twice as long.",
							&dpwin_retry_backoff_ms,
							500, 0, 60 * 1000,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dpwin.max_invocations",
							"Maximum number of invocations that can run at once (progress slots).",
							NULL,
							&dpwin_max_invocations,
							16, 1, 1024,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	/* the shared memory that dpwin.max_invocations sizes */
	dpwin_progress_init(dpwin_max_invocations);
	/* what the processes learn about servers, for every later one */
	dpwin_learned_init();

	MarkGUCPrefixReserved("dpwin");
}

PG_FUNCTION_INFO_V1(dpwin_version);

Datum
dpwin_version(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(DPWIN_VERSION_STR));
}

/* An invocation id as text, for messages and names. */
char *
dpwin_uuid_text(const pg_uuid_t *id)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(id)));
}

/* A palloc'd copy of a UUID, to pass as a Datum. */
pg_uuid_t *
dpwin_uuid_copy(const pg_uuid_t *id)
{
	pg_uuid_t  *c = palloc(sizeof(pg_uuid_t));

	memcpy(c, id, sizeof(pg_uuid_t));
	return c;
}
