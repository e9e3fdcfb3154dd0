/*-------------------------------------------------------------------------
 *
 * build.h
 *	  The generation of a refresh, which build.c owns: the ranges a refresh
 *	  replaces, the clone of the target with the window removed, the
 *	  generation's fields of c->build, and a rollback's kept backup checked
 *	  against the target.  Used by the steps (steps.h); calls none.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_BUILD_H
#define DPWIN_BUILD_H

#include "admission.h"
#include "invocation.h"

/* The whole window, as the one range a refresh replaces. */
extern List *dpwin_build_window_ranges(Coordinator *c);

/* The staged chunks (all but the skipped ones), as contiguous ranges. */
extern List *dpwin_build_staged_ranges(Coordinator *c);

/* Do the skipped chunks' rows in the generation still match the source? */
extern void dpwin_build_check_skipped_rows(Coordinator *c);

/*
 * Clone the target into a fresh generation without the ranges; _alone on
 * the first connection only, while the second runs a statement.
 */
extern void dpwin_build_prepare_generation(Coordinator *c, List *ranges);
extern void dpwin_build_prepare_generation_alone(Coordinator *c, List *ranges);

/* Narrow the clone made beside the workers to the staged ranges. */
extern bool dpwin_build_narrow_generation(Coordinator *c, List *ranges);

/*
 * The writers of the generation's fields of c->build (invocation.h) that
 * other files set.
 */
extern void dpwin_build_name_generation(Coordinator *c, const char *table);
extern void dpwin_build_recall_generation(Coordinator *c, char *table);
extern void dpwin_build_forget_generation(Coordinator *c);
extern void dpwin_build_set_final_rows(Coordinator *c, int64 rows);
extern void dpwin_build_set_kept_rows(Coordinator *c, int64 rows);

/* Whether a kept backup may be a rollback's generation (a refusal if not). */
extern DpwinRefusal *dpwin_build_check_backup(Coordinator *c, const char *backup,
											  char **uuid);

#endif							/* DPWIN_BUILD_H */
