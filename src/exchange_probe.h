/*-------------------------------------------------------------------------
 *
 * exchange_probe.h
 *	  Does EXCHANGE TABLES work in a ClickHouse database (exchange_probe.c)?
 *	  The probe's statements, and its answer remembered in shared memory
 *	  (docs/admission.md, "The EXCHANGE probe").
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_EXCHANGE_PROBE_H
#define DPWIN_EXCHANGE_PROBE_H

#include "chclient.h"

/*
 * Probe `database`, whose UUID system.databases gives as `database_uuid`,
 * unless this cluster learned since it started that EXCHANGE TABLES works
 * there, at the same UUID: create two scratch tables named name_prefix +
 * "probe_<random>_a" and "_b", exchange them, check that their UUIDs
 * swapped, and drop them.
 * A database where it does not work is an error with
 * ERRCODE_FEATURE_NOT_SUPPORTED.  The caller has admitted the server and
 * the database's engine.
 *
 * A probe that succeeded is remembered for every later process.
 */
extern void dpwin_exchange_probe(ChClient *client, const char *database,
								 const char *database_uuid,
								 const char *name_prefix);

/*
 * Forget that EXCHANGE TABLES works in `database` of the server at `url`,
 * so that the next refresh probes again: for a caller whose EXCHANGE the
 * server refused as unsupported.
 */
extern PGDLLEXPORT void dpwin_exchange_probe_forget(const char *url,
													const char *database);

#endif							/* DPWIN_EXCHANGE_PROBE_H */
