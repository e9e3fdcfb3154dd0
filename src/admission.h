/*-------------------------------------------------------------------------
 *
 * admission.h
 *	  Admission of a ClickHouse target before any data moves (admission.c);
 *	  what it learns is a DpwinTargetInfo (target.h).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_ADMISSION_H
#define DPWIN_ADMISSION_H

#include "chclient.h"
#include "route.h"
#include "target.h"

/*
 * A verdict that the target does not admit what is asked of it, as a
 * value: the caller decides what a refusal means (publication settles the
 * invocation as not published on one, docs/design.md, "The state
 * machine"), and
 * dpwin_admission_raise() turns it into its error, with its own errcode and
 * a message naming the target and what is wrong.  detail and hint may be
 * NULL.
 */
typedef struct DpwinRefusal
{
	int			sqlerrcode;
	char	   *message;
	char	   *detail;
	char	   *hint;
} DpwinRefusal;

pg_noreturn extern void dpwin_admission_raise(const DpwinRefusal *refusal);

/*
 * Admission (docs/admission.md): Atomic database, plain
 * MergeTree, no TTL, projections, dependent views, DEFAULT/MATERIALIZED/
 * ALIAS columns, active mutations or row policies; the route's columns in
 * the same order with parity of types (rowbinary.c); window column
 * DateTime64(p, 'UTC') with p <= 6 (optionally Nullable).  Reads only,
 * before anything is written.  The first admission on a client reads the
 * server's facts and the target's at once, on a second connection that
 * it closes again: one round trip in sequence.
 *
 * dpwin_admission_try_admit() returns the target, or NULL with the first
 * refusal in *refusal; what is not a verdict (a failed request, a target
 * or database that does not exist) ereports.  dpwin_admission_admit()
 * ereports a refusal as well.
 */
extern DpwinTargetInfo *dpwin_admission_try_admit(ChClient *client,
												  const DpwinRoute *route,
												  DpwinRefusal **refusal);
extern PGDLLEXPORT DpwinTargetInfo *dpwin_admission_admit(ChClient *client,
														  const DpwinRoute *route);

/*
 * Is a target admitted again the one admitted before?  A refusal when its
 * UUID is no longer `uuid`, or its schema no longer `schema_fingerprint`
 * (either NULL: not compared); `when` ends the message ("between
 * generation build and publication").
 */
extern DpwinRefusal *dpwin_admission_check_unchanged(const DpwinTargetInfo *now,
													 const char *uuid,
													 const char *schema_fingerprint,
													 const char *when);

/*
 * Has `other`, admitted as the route's target is (dpwin_admission_try_admit()
 * on its name), the structure of `target`: the same columns and types in
 * the same order (else a refusal with ERRCODE_DATATYPE_MISMATCH), the same
 * partition and sorting keys, engine and definition (schema fingerprint;
 * else ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE)?  NULL when it has; `what`
 * names `other` in the message ("backup").  No hint: the caller's.
 */
extern DpwinRefusal *dpwin_admission_check_like_target(const DpwinTargetInfo *target,
													   const DpwinTargetInfo *other,
													   const char *what);

/*
 * Does EXCHANGE TABLES work in the target database?  Asked of ClickHouse
 * only once per database and UUID while PostgreSQL runs (exchange_probe.c);
 * a clear error when it does
 * not, or when the server is too old for Atomic/EXCHANGE/DateTime64.  The
 * probe's two scratch tables are named name_prefix + "probe_<random>_a/_b":
 * a refresh passes its invocation's table prefix, so that recovery drops
 * the tables of a probe cut short.
 * admitted: the caller has just admitted a target in this database
 * (dpwin_admission_admit), which checked the server and the database's
 * engine and read the database's UUID; the probe then does not ask again.
 */
extern PGDLLEXPORT void dpwin_admission_probe_exchange(ChClient *client, const char *database,
													   const char *name_prefix,
													   bool admitted);

#endif							/* DPWIN_ADMISSION_H */
