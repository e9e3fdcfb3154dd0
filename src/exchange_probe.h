/*-------------------------------------------------------------------------
 *
 * exchange_probe.h
 *	  Does EXCHANGE TABLES work in a ClickHouse database (exchange_probe.c)?
 *	  The probe's statements, and its answer kept in dpwin.exchange_probe
 *	  (docs/admission.md, "The EXCHANGE probe").
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_EXCHANGE_PROBE_H
#define DPWIN_EXCHANGE_PROBE_H

#include "chclient.h"

/*
 * Probe `database`, whose UUID system.databases gives as `database_uuid`,
 * unless dpwin.exchange_probe already says that EXCHANGE TABLES works
 * there: create two scratch tables named name_prefix + "probe_<random>_a"
 * and "_b", exchange them, check that their UUIDs swapped, and drop them.
 * A database where it does not work is an error with
 * ERRCODE_FEATURE_NOT_SUPPORTED.  The caller has admitted the server and
 * the database's engine.
 *
 * A probe that succeeded is written to dpwin.exchange_probe, in the
 * caller's transaction when it has one, else in one of its own.  In a
 * read-only transaction (a refresh's snapshot) the backend remembers it,
 * and the next call for the same database writes it.
 */
extern void dpwin_exchange_probe(ChClient *client, const char *database,
								 const char *database_uuid,
								 const char *name_prefix);

/*
 * Forget that EXCHANGE TABLES works in `database` of server `server_name`
 * (every UUID), so that the next refresh probes again: for a caller whose
 * EXCHANGE the server refused as unsupported.
 */
extern void dpwin_exchange_probe_forget(const char *server_name,
										const char *database);

#endif							/* DPWIN_EXCHANGE_PROBE_H */
