/*-------------------------------------------------------------------------
 *
 * partition.h
 *	  Publication whose cost follows the window, not the table: when the
 *	  target is partitioned so that whole partitions lie outside the
 *	  window, the generation gets those partitions by cloning (ALTER TABLE
 *	  ... ATTACH PARTITION ID ... FROM target, which hard-links the parts)
 *	  and rows are copied only from the partitions that may hold window
 *	  rows.  Every decision is taken from metadata (the parts' minmax
 *	  indexes, read through ClickHouse's implicit _minmax_count_projection,
 *	  and system.parts), never by scanning the target; cloned partitions
 *	  are verified by comparing parts (partition, rows, checksum of all
 *	  files), everything else by digest as before.
 *
 *	  With an unpartitioned target, or one whose partition key does not
 *	  involve the window column, nothing is cloned and every function
 *	  behaves exactly like the plain copy-and-digest path of target.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_PARTITION_H
#define DPWIN_PARTITION_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

#include "chclient.h"
#include "digest.h"
#include "target.h"

typedef struct DpwinPartitionPlan
{
	bool		cloning;		/* false: copy every kept row */
	char	   *why_not;		/* when !cloning: why, for evidence */
	List	   *cloned;			/* partition ids (char *) attached whole */
	List	   *copied;			/* target partition ids copied row by row */
	int64		cloned_parts;	/* parts of the cloned partitions */
	int64		cloned_rows;	/* rows of the cloned partitions */
	int			target_partitions;	/* partitions of the target at planning */
	int			staged_partitions;	/* partitions the staged rows fall into */
	int			digest_checked; /* cloned partitions whose parts differed
								 * and that were compared by digest */
	char	   *not_cloned_sql; /* "_partition_id NOT IN (...)", NULL when
								 * nothing is cloned */
} DpwinPartitionPlan;

/*
 * Decide, from metadata only, which partitions of the target can be cloned
 * into the generation: every part of the partition has a minmax index on
 * the window column showing no value in [lo, hi) (a part whose index is
 * all NULL holds only NULL window values, which are kept), and no staged
 * row falls into the partition.  staging_tables names the verified staging
 * tables (char *), which have the target's partition key.
 */
extern DpwinPartitionPlan *dpwin_partition_plan(ChClient *client,
												const DpwinTargetInfo *target,
												const char *window_column,
												TimestampTz lo, TimestampTz hi,
												List *staging_tables);

/*
 * Put the target's kept rows into the (empty) generation: ATTACH the
 * cloned partitions, then INSERT ... SELECT the kept rows (keep_sql) of
 * every other partition.
 */
extern void dpwin_partition_fill_keep(ChClient *client,
									  const DpwinTargetInfo *target,
									  DpwinPartitionPlan *plan,
									  const char *generation,
									  const char *keep_sql);

/*
 * Put the verified staged rows into the generation.  When the plan clones
 * partitions, the staging tables' partitions are cloned too (ATTACH
 * PARTITION ID ... FROM <staging>, hard links): a staging table is a
 * CREATE TABLE AS copy of the target, so its parts fit the generation as
 * they are, and the staged rows are not written a second time.  Otherwise
 * (unpartitioned target, ...) their rows are copied, as before.
 */
extern void dpwin_partition_fill_staged(ChClient *client,
										const DpwinTargetInfo *target,
										const DpwinPartitionPlan *plan,
										const char *generation,
										List *staging_tables);

/*
 * Digest of db.table outside the cloned partitions, further restricted by
 * where_sql when not NULL (same answer as dpwin_target_digest when nothing
 * is cloned).  Its cost follows the partitions read, not the table (see
 * PARTITION_QUERY_SETTINGS in partition.c).
 */
extern void dpwin_partition_digest(ChClient *client,
								   const DpwinTargetInfo *target,
								   const DpwinPartitionPlan *plan,
								   const char *table, const char *where_sql,
								   const DpwinDigestKey *key, DpwinDigest *out);

/*
 * Verify the cloned partitions of the generation without reading them:
 * their parts (partition id, rows, hash_of_all_files) equal the target's
 * now, and their minmax indexes show no window value.  A partition whose
 * parts differ (a background merge on either side, or a change of the
 * target) is compared by digest of its kept rows instead; ereports when
 * the rows differ (the target changed `when`) or when a cloned partition
 * of the generation may hold window rows.  Sets plan->cloned_rows from the
 * generation's parts.
 */
extern void dpwin_partition_verify_cloned(ChClient *client,
										  const DpwinTargetInfo *target,
										  DpwinPartitionPlan *plan,
										  const char *generation,
										  const char *window_column,
										  TimestampTz lo, TimestampTz hi,
										  const char *keep_sql,
										  const DpwinDigestKey *key,
										  const char *when);

/* The plan as a jsonb object text, for evidence. */
extern char *dpwin_partition_plan_json(const DpwinPartitionPlan *plan);

#endif							/* DPWIN_PARTITION_H */
