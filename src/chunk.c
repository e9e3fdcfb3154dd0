/*-------------------------------------------------------------------------
 *
 * chunk.c
 *	  The chunk journal (dpwin.chunk): each chunk's attempts, as its worker
 *	  begins and ends them, and the receipts a recovering coordinator reads
 *	  back.  Every write is fenced by the target's lease epoch (lease.h).
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "chunk.h"
#include "lease.h"

void
dpwin_chunk_begin(const pg_uuid_t *id, int chunk_no, int attempt,
				  const char *staging_table, int32 target_id, int64 epoch)
{
	Oid			types[5] = {UUIDOID, INT4OID, INT4OID, TEXTOID, INT8OID};
	Datum		args[5];
	char		nulls[6] = "     ";

	dpwin_lease_check_epoch(target_id, epoch);
	args[0] = UUIDPGetDatum(dpwin_uuid_copy(id));
	args[1] = Int32GetDatum(chunk_no);
	args[2] = Int32GetDatum(attempt);
	if (staging_table)
		args[3] = CStringGetTextDatum(staging_table);
	else
		nulls[3] = 'n';
	args[4] = Int64GetDatum(epoch);
	if (dpwin_catalog_exec(psprintf("UPDATE dpwin.chunk SET attempt = $3, state = 'running',"
									" staging_table = $4, lease_epoch = $5, worker_pid = %d,"
									" rows = NULL, bytes = NULL, digest = NULL, error = NULL,"
									" started_at = clock_timestamp(), finished_at = NULL"
									" WHERE invocation_id = $1 AND chunk_no = $2"
									"   AND state IN ('pending', 'fenced', 'running', 'failed')",
									MyProcPid),
						   5, types, args, nulls, false) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("chunk %d of dpwin invocation %s cannot start a new attempt",
						chunk_no, dpwin_uuid_text(id))));
}

void
dpwin_chunk_end(const pg_uuid_t *id, int chunk_no, int attempt,
				const char *state, int64 rows, int64 bytes,
				const DpwinDigest *digest, const char *error,
				int32 target_id, int64 epoch)
{
	Oid			types[7] = {UUIDOID, INT4OID, INT4OID, TEXTOID, INT8OID, INT8OID, TEXTOID};
	Datum		args[8];
	char		nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	Oid			types8[8];

	dpwin_lease_check_epoch(target_id, epoch);
	memcpy(types8, types, sizeof(types));
	types8[7] = TEXTOID;
	args[0] = UUIDPGetDatum(dpwin_uuid_copy(id));
	args[1] = Int32GetDatum(chunk_no);
	args[2] = Int32GetDatum(attempt);
	args[3] = CStringGetTextDatum(state);
	args[4] = Int64GetDatum(rows);
	args[5] = Int64GetDatum(bytes);
	if (digest)
		args[6] = CStringGetTextDatum(dpwin_digest_to_text(digest));
	else
		nulls[6] = 'n';
	if (error)
		args[7] = CStringGetTextDatum(error);
	else
		nulls[7] = 'n';
	if (dpwin_catalog_exec("UPDATE dpwin.chunk SET state = $4, rows = $5, bytes = $6,"
						   " digest = $7, error = $8, finished_at = clock_timestamp()"
						   " WHERE invocation_id = $1 AND chunk_no = $2 AND attempt = $3",
						   8, types8, args, nulls, false) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("attempt %d of chunk %d of dpwin invocation %s is no longer current",
						attempt, chunk_no, dpwin_uuid_text(id))));
}

/* Columns of dpwin_chunk_load()'s query of dpwin.chunk. */
#define Anum_chunk_chunk_no			1
#define Anum_chunk_state			2
#define Anum_chunk_staging_table	3
#define Anum_chunk_rows				4
#define Anum_chunk_bytes			5
#define Anum_chunk_digest			6
#define Anum_chunk_attempts			7
#define Anum_chunk_lo				8
#define Anum_chunk_hi				9

DpwinChunkSlot *
dpwin_chunk_load(const pg_uuid_t *id, int *nchunks)
{
	Oid			types[1] = {UUIDOID};
	Datum		args[1];
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext spicxt;
	DpwinChunkSlot *slots;
	int			n;

	args[0] = UUIDPGetDatum(dpwin_uuid_copy(id));
	n = (int) dpwin_catalog_exec("SELECT chunk_no, state, staging_table, rows, bytes,"
								 " digest, attempt + 1, lo, hi"
								 " FROM dpwin.chunk WHERE invocation_id = $1 ORDER BY chunk_no",
								 1, types, args, NULL, true);
	/* in the caller's context: SPI_finish frees SPI's */
	spicxt = MemoryContextSwitchTo(caller);
	slots = palloc0(sizeof(DpwinChunkSlot) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		DpwinChunkSlot *s = &slots[i];
		char	   *v;

		s->chunk_no = dpwin_catalog_int32(i, Anum_chunk_chunk_no);
		v = dpwin_catalog_text(i, Anum_chunk_state);
		s->result = strcmp(v, "verified") == 0 ? DPWIN_CHUNK_VERIFIED :
			strcmp(v, "skipped") == 0 ? DPWIN_CHUNK_SKIPPED : DPWIN_CHUNK_FAILED;
		if ((v = dpwin_catalog_text(i, Anum_chunk_staging_table)) != NULL)
			strlcpy(s->staging_table, v, sizeof(s->staging_table));
		s->rows = (uint64) dpwin_catalog_int64_or(i, Anum_chunk_rows, 0);
		s->bytes = (uint64) dpwin_catalog_int64_or(i, Anum_chunk_bytes, 0);
		if ((v = dpwin_catalog_text(i, Anum_chunk_digest)) != NULL)
			(void) dpwin_digest_from_text(v, &s->digest);
		s->attempts = dpwin_catalog_int32(i, Anum_chunk_attempts);
		s->lo = dpwin_catalog_timestamptz(i, Anum_chunk_lo);
		s->hi = dpwin_catalog_timestamptz(i, Anum_chunk_hi);
	}
	MemoryContextSwitchTo(spicxt);
	*nchunks = n;
	return slots;
}
