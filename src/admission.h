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
 * Admission (docs/admission.md): Atomic database, plain
 * MergeTree, no TTL, projections, dependent views, DEFAULT/MATERIALIZED/
 * ALIAS columns, active mutations or row policies; the route's columns in
 * the same order with parity of types (rowbinary.c); window column
 * DateTime64(p, 'UTC') with p <= 6 (optionally Nullable).  Each refusal
 * ereports with its own errcode and a message naming the target and what
 * is wrong, before anything is written.
 */
extern PGDLLEXPORT DpwinTargetInfo *dpwin_target_admit(ChClient *client,
										   const DpwinRoute *route);

/*
 * Probe once per server that EXCHANGE TABLES works (two scratch tables in
 * the target database, named name_prefix + "probe_<random>_a/_b", dropped
 * afterwards); a clear error when it does not, or when the server is too
 * old for Atomic/EXCHANGE/DateTime64.  A refresh passes its invocation's
 * table prefix, so that recovery drops the tables of a probe cut short.
 */
extern PGDLLEXPORT void dpwin_target_probe_exchange(ChClient *client, const char *database,
													 const char *name_prefix);

#endif							/* DPWIN_ADMISSION_H */
