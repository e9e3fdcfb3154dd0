/*-------------------------------------------------------------------------
 *
 * stage.c
 *	  The steps before the generation (steps.h; docs/design.md, "The state
 *	  machine"):
 *
 *	  planned     admit the target under the lease      -> extracting
 *	  extracting  one snapshot, the chunk workers        -> staged
 *	  staged      every receipt verified                 -> verified
 *
 *	  extraction.c runs the extraction itself, and build.c prepares the
 *	  generation that the extraction overlaps with.  Recovery never enters
 *	  these steps: an invocation left planned or extracting lost its
 *	  snapshot with its coordinator (coordinator.c).
 *
 *-------------------------------------------------------------------------
 */
#include "dpwin.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "build.h"
#include "facts.h"
#include "names.h"
#include "steps.h"

/* Commits with extracting: what admission learned. */
static void
commit_schema(Coordinator *c)
{
	dpwin_registry_set_schema(&c->id, c->epoch, c->target->schema_fingerprint);
}

DpwinStepResult
dpwin_step_planned(Coordinator *c)
{
	dpwin_invocation_set_target(c, dpwin_extraction_admit(c->client, c->route,
														  c->cxt, NULL));
	return dpwin_step_result(DPWIN_STATE_EXTRACTING, commit_schema);
}

/*
 * The last publication's digest of the chunk [lo, hi), when its cache
 * holds one.
 */
static bool
cached_digest(const DpwinDigestCache *cache, const DpwinChunkBounds *b,
			  DpwinDigest *digest)
{
	for (int i = 0; i < cache->nchunks; i++)
		if (cache->lo[i] == b->lo && cache->hi[i] == b->hi)
		{
			*digest = cache->digest[i];
			return true;
		}
	return false;
}

/*
 * A refresh that skips unchanged chunks compares each chunk with the
 * target's rows of [lo, hi), and this function reads those rows' digests
 * first.  It reads the target's parts first of all.  The route's last
 * publication may already know a chunk's digest: it does when the target
 * is still the table that publication published, with the layout it left
 * (the same rows, merged or not) and the schema it saw.  ClickHouse
 * digests the other chunks, all in one statement.  The build step clones
 * the generation once the chunks are known, and it keeps the skipped
 * chunks' rows from that clone only if the target's parts are still the
 * ones read here; otherwise it digests them again in the clone.
 */
static List *
prepare_skipping(Coordinator *c)
{
	DpwinExtraction *x = &c->ext;
	DpwinDigestCache *cache = c->digest_cache;
	DpwinDigest *target = palloc(sizeof(DpwinDigest) * list_length(x->chunks));
	List	   *parts;
	char	   *layout;
	List	   *span = NIL;
	int			first = -1;
	int			last = -1;
	int			i = 0;
	ListCell   *lc;

	dpwin_invocation_open_slots(c);
	parts = dpwin_generation_target_parts(c->client, c->target, &layout);
	if (cache != NULL &&
		(memcmp(&cache->key, &x->key, sizeof(DpwinDigestKey)) != 0 ||
		 strcmp(cache->target_uuid, c->target->uuid) != 0 ||
		 strcmp(cache->schema_fingerprint, c->target->schema_fingerprint) != 0 ||
		 strcmp(cache->layout, layout) != 0))
		cache = NULL;

	/* the chunks the cache does not answer, from the first to the last */
	foreach(lc, x->chunks)
	{
		if (cache == NULL || !cached_digest(cache, lfirst(lc), &x->slots[i].target_digest))
		{
			if (first < 0)
				first = i;
			last = i;
		}
		i++;
	}
	c->cached_digests = x->nchunks - (first < 0 ? 0 : last - first + 1);
	if (first < 0)
		return parts;
	for (i = first; i <= last; i++)
		span = lappend(span, list_nth(x->chunks, i));
	dpwin_target_chunk_digests(c->client, c->target, c->route->target_table,
							   c->route->window_column, span, &x->key, target);
	for (i = first; i <= last; i++)
		x->slots[i].target_digest = target[i - first];
	return parts;
}

/*
 * Does EXCHANGE TABLES work in the target's database?  Asked once the
 * target is admitted and before anything is published: a refresh asks
 * while its workers read the source (off their critical path), and fails
 * with the probe's error if the answer is no.  ClickHouse is asked once
 * per database and UUID while PostgreSQL runs (exchange_probe.c).
 *
 * Not asked at all while the target is the generation that the route's last
 * publication exchanged into its place: EXCHANGE TABLES has worked on
 * this very table, and asking would create, swap and drop two tables on
 * every scheduled refresh.  Should the table have moved since to a
 * database where it does not work, the EXCHANGE fails, atomically, and
 * nothing is published (docs/design.md, "The conversation with
 * ClickHouse").
 */
static void
probe_exchange(Coordinator *c)
{
	MemoryContext cxt;

	if (c->published_generation != NULL &&
		strcmp(c->published_generation, c->target->uuid) == 0)
		return;
	cxt = MemoryContextSwitchTo(c->cxt);
	dpwin_admission_probe_exchange(c->client, c->route->target_database,
								   dpwin_invocation_table_prefix(c->route->route_id, &c->id),
								   true);
	MemoryContextSwitchTo(cxt);
}

/*
 * While the workers read the source: the EXCHANGE probe, then the clone of
 * the target (skipping: after the target's facts of each chunk, and whole,
 * since the staged chunks are not known yet).  Both are only a head start.
 * When they fail for a reason that may pass (a lost connection, a
 * restarted server, a refused statement) the workers go on: the probe is
 * asked again once they are done, and the build step clones again.  A
 * probe that says EXCHANGE TABLES does not work
 * (ERRCODE_FEATURE_NOT_SUPPORTED) fails the refresh at once, and so does a
 * cancellation.  A subtransaction of the snapshot's transaction contains
 * the error.
 */
static void
overlap_head_start(Coordinator *c, bool skipping)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;

	BeginInternalSubTransaction(NULL);
	/* what the clone learns outlives the snapshot's transaction */
	MemoryContextSwitchTo(c->cxt);
	PG_TRY();
	{
		probe_exchange(c);
		if (!skipping)
		{
			dpwin_build_prepare_generation(c, dpwin_build_window_ranges(c));
			/* what the generation holds before the attach, for its counts */
			dpwin_generation_read_baseline(c->client, c->target, c->build.gen);
		}
		else
		{
			c->ext.kept_facts = dpwin_facts_read_target(c->client, c->target,
														c->route->window_column,
														c->ext.chunks, c->lo, c->hi,
														&c->ext.kept_null_rows);
			/* the whole target, narrowed once the staged chunks are known */
			if (c->target->partition_key[0] != '\0')
				dpwin_build_prepare_generation(c, NIL);
		}
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(c->cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED || QueryCancelPending ||
			ProcDiePending || edata->sqlerrcode == ERRCODE_FEATURE_NOT_SUPPORTED)
			ReThrowError(edata);
		ereport(LOG,
				(errmsg("dpwin: invocation %s probes and clones its target after extraction: %s",
						dpwin_uuid_text(&c->id), edata->message)));
		dpwin_build_forget_generation(c);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
}

static void
overlap_clone(void *arg)
{
	overlap_head_start((Coordinator *) arg, false);
}

/*
 * A refresh that skips unchanged chunks knows which chunks it stages only
 * once its workers are done.  They overlap the probe, the window's facts
 * among the target's rows of each chunk (those of the chunks it keeps are
 * the generation's while the target's parts stay as they were read before
 * the workers started), and a clone of the whole of a partitioned target,
 * from which the staged chunks' partitions are dropped afterwards where
 * they lie wholly inside them (dpwin_step_extracting).
 */
static void
overlap_skipping(void *arg)
{
	overlap_head_start((Coordinator *) arg, true);
}

/*
 * What a skipping refresh's generation holds before the attach, for its
 * counts, where every chunk's facts are known without reading it: from the
 * clone's parts and the target's NULL-window rows read with its facts,
 * where they tell; else counted.
 */
static void
count_clone(Coordinator *c)
{
	/* a skipped chunk without its facts: they are read from the generation */
	if (c->ext.kept_facts == NULL && c->ext.skipped_chunks > 0)
		return;
	if (c->ext.kept_facts == NULL ||
		!dpwin_generation_baseline_from_clone(c->build.gen, c->ext.kept_null_rows))
		dpwin_generation_read_baseline(c->client, c->target, c->build.gen);
}

/* Commits with staged: the snapshot every chunk was read under. */
static void
commit_snapshot(Coordinator *c)
{
	dpwin_registry_set_snapshot(&c->id, c->epoch, c->ext.snapshot_name);
}

DpwinStepResult
dpwin_step_extracting(Coordinator *c)
{
	if (c->route->skip_unchanged)
	{
		List	   *parts;
		List	   *staged;

		parts = prepare_skipping(c);
		c->times.extract = dpwin_invocation_extract(c, DPWIN_EXTRACT_SKIP_UNCHANGED,
													overlap_skipping, c);
		/* nothing to ask when the probe answered during the extraction */
		probe_exchange(c);
		staged = dpwin_build_staged_ranges(c);
		if (!dpwin_build_narrow_generation(c, staged))
			dpwin_build_prepare_generation(c, staged);
		if (!dpwin_generation_parts_equal(parts, c->build.gen->target_parts))
		{
			/* what was read of the target may not be its rows any more */
			c->ext.kept_facts = NULL;
			if (c->ext.skipped_chunks > 0)
				dpwin_build_check_skipped_rows(c);
		}

		count_clone(c);
	}
	else
	{
		c->times.extract = dpwin_invocation_extract(c, DPWIN_EXTRACT_STAGE,
													overlap_clone, c);
		/* nothing to ask when the probe answered during the extraction */
		probe_exchange(c);
	}
	return dpwin_step_result(DPWIN_STATE_STAGED, commit_snapshot);
}

/*
 * Every chunk was staged and verified under one snapshot that was closed
 * normally: the receipts are consistent, and publishing them needs no
 * snapshot.
 */
DpwinStepResult
dpwin_step_staged(Coordinator *c)
{
	dpwin_extraction_tally(&c->ext, &c->id, true);
	return dpwin_step_result(DPWIN_STATE_VERIFIED, NULL);
}
