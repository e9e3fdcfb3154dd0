/*-------------------------------------------------------------------------
 *
 * build.c
 *	  The generation of a refresh (docs/design.md, "Building the
 *	  generation").  This file computes the ranges that a refresh
 *	  replaces, and it clones the target into the generation and removes
 *	  the window from the clone.  The extracting step prepares the clone
 *	  as a head start while the workers read the source; the verified step
 *	  prepares it when no head start is usable.  It also writes the
 *	  generation's fields of c->build (invocation.h), and checks a
 *	  rollback's generation, a kept backup, against the target.
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "admission.h"
#include "build.h"
#include "names.h"
#include "window.h"

/*
 * Merge the chunks (DpwinChunkBounds, in order) into the fewest
 * contiguous ranges.
 */
static List *
merge_ranges(List *chunks)
{
	List	   *ranges = NIL;
	DpwinChunkBounds *last = NULL;
	ListCell   *lc;

	foreach(lc, chunks)
	{
		DpwinChunkBounds *c = lfirst(lc);

		if (last != NULL && last->hi == c->lo)
		{
			last->hi = c->hi;
			continue;
		}
		last = palloc(sizeof(DpwinChunkBounds));
		*last = *c;
		last->chunk_no = list_length(ranges);
		ranges = lappend(ranges, last);
	}
	return ranges;
}

/* The whole window, as the one range a refresh replaces. */
List *
dpwin_build_window_ranges(Coordinator *c)
{
	DpwinChunkBounds *r = palloc(sizeof(DpwinChunkBounds));

	r->chunk_no = 0;
	r->lo = c->lo;
	r->hi = c->hi;
	return list_make1(r);
}

/* The staged chunks (all but the skipped ones), as contiguous ranges. */
List *
dpwin_build_staged_ranges(Coordinator *c)
{
	List	   *staged = NIL;

	for (int i = 0; i < c->ext.nchunks; i++)
	{
		DpwinChunkBounds *b;

		if (c->ext.slots[i].result != DPWIN_CHUNK_VERIFIED)
			continue;
		b = palloc(sizeof(DpwinChunkBounds));
		b->chunk_no = c->ext.slots[i].chunk_no;
		b->lo = c->ext.slots[i].lo;
		b->hi = c->ext.slots[i].hi;
		staged = lappend(staged, b);
	}
	return merge_ranges(staged);
}

/*
 * The whole target, cloned while the workers compared the chunks, narrowed
 * to the staged chunks' ranges (dpwin_generation_narrow()).  False, with
 * nothing changed, where there is no such clone or it cannot be narrowed:
 * the caller clones again.
 */
bool
dpwin_build_narrow_generation(Coordinator *c, List *ranges)
{
	TimestampTz started = GetCurrentTimestamp();
	MemoryContext oldcxt;
	bool		narrowed;

	if (c->build.gen == NULL)
		return false;
	oldcxt = MemoryContextSwitchTo(c->cxt);
	narrowed = dpwin_generation_narrow(c->client, c->target, c->build.gen, ranges);
	c->times.build += dpwin_seconds_since(started);
	MemoryContextSwitchTo(oldcxt);
	return narrowed;
}

/*
 * Chunks that were skipped keep their rows from a clone of the target made
 * after they were compared (by a recovering process, or after the target's
 * parts changed): those rows must still be what the source had.
 */
void
dpwin_build_check_skipped_rows(Coordinator *c)
{
	DpwinDigest *now = palloc(sizeof(DpwinDigest) * c->ext.nchunks);

	dpwin_target_chunk_digests(c->client, c->target, c->build.generation,
							   c->route->window_column, c->ext.chunks, &c->ext.key, now);
	for (int i = 0; i < c->ext.nchunks; i++)
		if (c->ext.slots[i].result == DPWIN_CHUNK_SKIPPED &&
			!dpwin_digest_equal(&now[i], &c->ext.slots[i].digest))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("target %s changed inside skipped chunk %d since invocation %s compared it",
							dpwin_ch_qualified_name(c->route->target_database, c->route->target_table),
							c->ext.slots[i].chunk_no, dpwin_uuid_text(&c->id)),
					 errhint("Start a new invocation.")));
}

/*
 * Clone the target into a fresh generation and remove the window from the
 * clone.  A first run does it while the chunk workers read the source;
 * recovery, and a run whose generation went with a failed attempt, before
 * the staged parts are attached.
 */
static void
prepare_generation(Coordinator *c, List *ranges, ChClient *aside)
{
	TimestampTz started = GetCurrentTimestamp();
	MemoryContext oldcxt;

	/* during extraction the snapshot's transaction is current: stay out of it */
	oldcxt = MemoryContextSwitchTo(c->cxt);

	c->build.generation = MemoryContextStrdup(c->cxt,
											  dpwin_generation_name(c->route->route_id, &c->id));
	c->build.gen = dpwin_generation_clone(c->client, aside, c->target,
										  c->route->window_column, ranges,
										  c->build.generation, &c->ext.key);
	dpwin_generation_remove_ranges(c->client, c->target, c->build.gen);
	c->times.build = dpwin_seconds_since(started);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * The second connection is idle here (the extracting step): the reads of
 * the clone that do not wait for the statement before them run on it
 * (dpwin_generation_clone()).
 */
void
dpwin_build_prepare_generation(Coordinator *c, List *ranges)
{
	prepare_generation(c, ranges, dpwin_invocation_second_client(c));
}

/* The same on the first connection alone, while the second is busy. */
void
dpwin_build_prepare_generation_alone(Coordinator *c, List *ranges)
{
	prepare_generation(c, ranges, NULL);
}

/* Name the generation that an intent journaled (publication, recovery). */
void
dpwin_build_name_generation(Coordinator *c, const char *table)
{
	c->build.generation = MemoryContextStrdup(c->cxt, table);
}

/*
 * The generation of an earlier process, whose build is not known here:
 * only its table, column and ranges, enough to check it against the
 * target.  Nothing changes when this process built the generation.
 */
void
dpwin_build_recall_generation(Coordinator *c, char *table)
{
	if (c->build.gen != NULL)
		return;
	c->build.gen = palloc0(sizeof(DpwinGeneration));
	c->build.gen->table = table;
	c->build.gen->window_column = c->route->window_column;
	c->build.gen->ranges = dpwin_build_window_ranges(c);
}

/* The clone failed part way: the build step clones again. */
void
dpwin_build_forget_generation(Coordinator *c)
{
	c->build.gen = NULL;
}

/* The rows the published target holds. */
void
dpwin_build_set_final_rows(Coordinator *c, int64 rows)
{
	c->build.final_rows = rows;
}

/* The rows the published target kept from the old one, outside the window. */
void
dpwin_build_set_kept_rows(Coordinator *c, int64 rows)
{
	c->build.kept_rows = rows;
}

/*
 * A rollback's generation is a kept backup (docs/design.md, "Rolling back
 * a generation"), built long ago: it may take the target's place only
 * while admission admits it as it admits the route's target, and it has
 * the structure of the target as admitted now (c->target).  NULL when it
 * may, with its UUID in *uuid (if not NULL); else the refusal, with its
 * hint.  A backup that no longer exists ereports (42P01).
 */
DpwinRefusal *
dpwin_build_check_backup(Coordinator *c, const char *backup, char **uuid)
{
	DpwinRoute	as_target = *c->route;
	DpwinTargetInfo *info;
	DpwinRefusal *refusal;

	as_target.target_table = MemoryContextStrdup(c->cxt, backup);
	info = dpwin_extraction_admit(c->client, &as_target, c->cxt, &refusal);
	if (refusal == NULL)
		refusal = dpwin_admission_check_like_target(c->target, info, "backup");
	if (refusal != NULL)
	{
		refusal->hint = psprintf("This backup can no longer take the place of target %s: roll back to another backup of route \"%s\", or refresh its windows again.",
								 dpwin_ch_qualified_name(c->target->database, c->target->table),
								 c->route->route_name);
		return refusal;
	}
	if (uuid != NULL)
		*uuid = MemoryContextStrdup(c->cxt, info->uuid);
	return NULL;
}
