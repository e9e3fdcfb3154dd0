/*-------------------------------------------------------------------------
 *
 * generation.h
 *	  The replacement generation of a target, built by cloning in
 *	  generation.c: every part
 *	  of the target is hard-linked into the generation (ATTACH PARTITION
 *	  ... FROM), the window's rows are removed from the clone, the verified
 *	  staged parts are attached, and each step is verified by structure
 *	  (system.parts) and by counting the window column, never by reading
 *	  the kept rows (docs/design.md, "Building the generation").
 *
 *	  A lower layer: ClickHouse statements only, no journal.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_GENERATION_H
#define DPWIN_GENERATION_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

#include "admission.h"
#include "chclient.h"
#include "digest.h"
#include "target.h"

typedef struct DpwinGeneration
{
	char	   *table;			/* the generation table */
	char	   *uuid;			/* its UUID, read when it was created */
	const char *window_column;
	List	   *ranges;			/* DpwinChunkBounds: what is replaced */

	/*
	 * the target's active parts when cloned, with their blocks (PartLines,
	 * generation.c), and as "partition\trows\thash"
	 */
	List	   *target_lines;
	List	   *target_parts;
	bool		parts_known;	/* target_parts describes the clone */

	/*
	 * The target's active parts read with the generation's once the staged
	 * parts are attached, for dpwin_generation_check_target(), which uses
	 * them once
	 */
	List	   *target_lines_now;
	bool		target_parts_read;

	int			partitions;		/* partitions of the target when cloned */
	int			cloned_partitions;
	int			dropped_partitions; /* wholly inside the ranges: not cloned */
	int64		cloned_parts;
	int64		cloned_rows;	/* rows of the cloned parts (system.parts) */
	bool		minmax_used;	/* classified from minmax indexes, not a scan */
	char	   *minmax_why_not; /* why the window column was read, when it was */
	int64		target_rows;	/* rows of the target when cloned */
	int64		cut_rows;		/* of them, in the partitions in `mixed` */
	bool		deleted;		/* a DELETE removed ranges from the clone */
	bool		rewritten;		/* ... rewriting the partitions in `mixed` */
	List	   *mixed;			/* partitions cloned via the scratch table */
	char	   *scratch;		/* where the DELETE runs, until attached */
	List	   *outside;		/* partitions cloned whole: no row in the
								 * ranges */
	List	   *outside_rows;	/* their rows in the target (PartitionMeta) */
	int64		target_kept_rows;	/* target rows outside the ranges */
	int64		attached_parts; /* staged parts attached */
	char	   *layout;			/* its layout once the staged parts are
									 * attached (NULL until then): see
									 * dpwin_generation_target_parts() */
	int			digest_checks;	/* checks that fell back to a digest */
	int			merged_partitions;	/* target partitions found merged only */

	/*
	 * The clone's parts as cloned, where they are the target's file for
	 * file and no row was removed from them (NIL otherwise)
	 */
	List	   *clone_parts;

	/*
	 * Before the staged parts are attached (dpwin_generation_read_baseline()):
	 * its parts, and of its rows, all kept, those whose window value is NULL
	 */
	bool		baseline_known;
	List	   *baseline_parts;
	int64		baseline_null_rows;

	/*
	 * The same counted by the clone's own statement, where no DELETE follows
	 * it: dpwin_generation_read_baseline() then takes them without a read
	 */
	bool		baseline_counted;
	bool		baseline_counted_ok;

	/* once attached: the staged parts, and the generation's parts then */
	List	   *staged_parts;
	List	   *attached_parts_now;
	bool		counted_by_parts;	/* dpwin_generation_parts_add_up() held */
} DpwinGeneration;

/*
 * Create the generation `name` (dropping any table of that name first) as
 * a copy of the target's structure and clone into it every partition of
 * the target that may hold a row outside `ranges` (the window, or the part
 * of it that is re-staged): partitions whose every part lies inside the
 * ranges are left out.  With no ranges every partition is cloned, none
 * judged.  Verifies that the cloned parts are the target's, file for file,
 * and records them, and counts the target's rows outside the ranges on
 * the window column.  With aside, an idle client of its own, the reads that do not depend on
 * the statement running on client run on it meanwhile.
 */
extern DpwinGeneration *dpwin_generation_clone(ChClient *client,
											   ChClient *aside,
											   const DpwinTargetInfo *target,
											   const char *window_column,
											   List *ranges,
											   const char *name,
											   const DpwinDigestKey *key);

/*
 * Narrow a clone of every partition of the target (made with no ranges,
 * before the ranges were known) to `ranges` by dropping the partitions
 * that lie wholly inside them, judged from the target's minmax indexes
 * now.  False, the generation unchanged, where that is not the clone
 * dpwin_generation_clone() makes with these ranges: a partition holds rows
 * on both sides of a range or cannot be judged without a scan, or the
 * target's parts are no longer those cloned.  The caller then clones
 * again.
 */
extern bool dpwin_generation_narrow(ChClient *client,
									const DpwinTargetInfo *target,
									DpwinGeneration *gen, List *ranges);
/*
 * Remove the rows inside the ranges from the clone by one DELETE, waited
 * for: a mutation that rewrites the cut partitions where they are a small
 * part of a partitioned target, else a lightweight DELETE.  The build's
 * counts check that exactly those rows went.
 */
extern void dpwin_generation_remove_ranges(ChClient *client,
										   const DpwinTargetInfo *target,
										   DpwinGeneration *gen);

/* What the chunks staged, for dpwin_generation_attach_staged(). */
typedef struct DpwinStaged
{
	List	   *tables;			/* the verified staging tables */
	int64		rows;			/* their rows */
	const DpwinDigest *digest;	/* their digest */
	ChClient   *parts_from;		/* when not NULL, the client on which
								 * dpwin_generation_staged_parts_start()
								 * lists their parts */
} DpwinStaged;

/*
 * Their parts, listed on a client of their own while the caller's works
 * (one statement, started: dpwin_ch_start()).
 */
extern void dpwin_generation_staged_parts_start(ChClient *client,
												const char *database,
												List *staging_tables);

/*
 * Attach the parts of the verified staging tables to the generation and
 * check them: every staged part is there file for file (or, after a
 * merge, the rows inside the ranges have the staged digest).  Reads the
 * target's parts with the generation's, for the next
 * dpwin_generation_check_target() to compare without a statement of its
 * own.  attached(arg), when not NULL, is called once the generation holds
 * every row it will publish, before its parts are checked, so that the
 * caller reads it on another connection meanwhile: the window's facts and
 * the counts that the caller checks.
 */
extern void dpwin_generation_attach_staged(ChClient *client,
										   const DpwinTargetInfo *target,
										   DpwinGeneration *gen,
										   const DpwinStaged *staged,
										   const DpwinDigestKey *key,
										   void (*attached) (void *arg),
										   void *arg);

/*
 * Once the clone holds no row inside the ranges, before the staged parts
 * are attached: its parts, and in one statement its rows (which must be
 * the target's kept rows, none inside the ranges) and those whose window
 * value is NULL.  Sets baseline_known when the counts are as they must be;
 * otherwise the checks after the attach read the counts and report.
 */
extern void dpwin_generation_read_baseline(ChClient *client,
										   const DpwinTargetInfo *target,
										   DpwinGeneration *gen);

/*
 * The same without a statement, from the clone's parts as cloned, where
 * every cloned partition lies outside the ranges (none was cut), the
 * clone's parts were the target's file for file, and their rows add up to
 * the target's kept rows; null_window_rows are the target's, read while
 * its parts were those.  False otherwise: dpwin_generation_read_baseline()
 * counts.
 */
extern bool dpwin_generation_baseline_from_clone(DpwinGeneration *gen,
												 int64 null_window_rows);

/*
 * After dpwin_generation_attach_staged(): are the generation's parts
 * exactly its parts before the attach and the staged parts, file for
 * file?  Then it holds the kept rows counted before and the staged rows:
 * *rows is their sum, read from the parts, and the caller need not count
 * the generation again.  False when the baseline is not known or any part
 * differs (a merge, or a write).
 */
extern bool dpwin_generation_parts_add_up(DpwinGeneration *gen, int64 *rows);

/* The predicate of the generation's ranges, as the counts use it. */
extern char *dpwin_generation_ranges_sql(const DpwinGeneration *gen);

/*
 * Right before the exchange, under the lease: is the target still the
 * table that was cloned?  Its parts (read now, or by the attach just
 * before) are compared with those recorded at cloning.  Where they differ
 * only by merges of the recorded parts (same blocks, rows and mutation,
 * a higher level), the rows are the same; where they differ otherwise,
 * or when they were not recorded (recovery of an invocation built by an
 * earlier process), the rows outside the ranges are compared by digest,
 * target against generation.  Returns NULL when they are the same, else the refusal
 * (admission.h; ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, naming `when`)
 * for the caller to raise; a failed request ereports.
 */
extern DpwinRefusal *dpwin_generation_check_target(ChClient *client,
												   const DpwinTargetInfo *target,
												   DpwinGeneration *gen,
												   const DpwinDigestKey *key,
												   const char *when);


/*
 * The target's active parts now, as dpwin_generation_clone() records them,
 * and whether two such records are the same parts, file for file.  With
 * layout, also the fingerprint of the target's layout, which a merge does
 * not change and any other change of its rows does (DpwinGeneration.layout).
 */
extern List *dpwin_generation_target_parts(ChClient *client,
										   const DpwinTargetInfo *target,
										   char **layout);
extern bool dpwin_generation_parts_equal(List *a, List *b);

#endif							/* DPWIN_GENERATION_H */
