/*-------------------------------------------------------------------------
 *
 * route.h
 *	  The route catalog (dpwin.route), which route.c owns.  The ClickHouse
 *	  foreign servers it names are fdw.h's.
 *
 *	  Never talks to ClickHouse.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_ROUTE_H
#define DPWIN_ROUTE_H

#include "datatype/timestamp.h"

typedef struct DpwinRoute
{
	int32		route_id;
	char	   *route_name;
	Oid			source_relid;
	char	   *source_schema;
	char	   *source_table;
	int			ncolumns;
	char	  **columns;		/* route column order == target column order */
	Oid		   *column_types;	/* current PostgreSQL types of the columns */
	int32	   *column_typmods;
	bool	   *column_notnull;
	int			window_index;	/* index of the window column in columns */
	char	   *window_column;
	char	   *server_name;
	char	   *target_database;
	char	   *target_table;
	int64		lookback_us;
	int64		chunk_us;
	int			parallelism;
	int			batch_rows;
	int64		max_encoded_bytes;
	Oid			evidence_function;	/* InvalidOid when none */
	bool		skip_unchanged; /* stage only chunks that differ from the
								 * target */
	Oid			owner;
	char	   *config_fingerprint; /* as stored by create/alter_route */
} DpwinRoute;

/*
 * Load a route by name or id (reads dpwin.route through SPI as the
 * extension's owner, so any role may call it; the caller must be inside a
 * transaction with a snapshot; it may be connected to SPI).  Takes
 * AccessShareLock on the source until the end of the transaction.
 * Resolves the source by its OID and the columns' current names, types and
 * NOT NULL flags; source_schema/source_table are the relation's current
 * names.  A source that no longer exists is ERRCODE_UNDEFINED_TABLE, a
 * route column that no longer exists ERRCODE_UNDEFINED_COLUMN.
 * missing_ok = false ereports ERRCODE_UNDEFINED_OBJECT naming the route;
 * missing_ok = true returns NULL instead.
 *
 * config_fingerprint is the stored one, i.e. what the owner last confirmed;
 * dpwin_route_fingerprint() of the loaded route differs from it when the
 * source was renamed or a column's type changed since.  alter_route with no
 * options re-validates the route and stores the new fingerprint.
 */
extern PGDLLEXPORT DpwinRoute *dpwin_route_load(const char *route_name, bool missing_ok);
extern DpwinRoute *dpwin_route_load_by_id(int32 route_id);

/*
 * The OID of a route's source table, read from the catalog without
 * locking or resolving it (for privilege checks that must come first).
 */
extern Oid	dpwin_route_source_relid(const char *route_name);

/* Owner or superuser, else ERRCODE_INSUFFICIENT_PRIVILEGE naming the route. */
extern PGDLLEXPORT void dpwin_route_check_owner(const DpwinRoute *route, const char *action);

/*
 * Member of dpwin_operator (or superuser), SELECT on the source columns,
 * USAGE on the server, EXECUTE on the evidence function (checked before any
 * I/O, as it is only called after publication), and no row-level security
 * applying to the caller on the source (a filtered read would delete target
 * rows).  Each failure is ERRCODE_INSUFFICIENT_PRIVILEGE naming the route.
 */
extern void dpwin_route_check_can_refresh(const DpwinRoute *route);

/*
 * Recompute the route's config fingerprint from its current definition
 * (SHA-256 hex of a canonical text form).
 */
extern char *dpwin_route_fingerprint(const DpwinRoute *route);

#endif							/* DPWIN_ROUTE_H */
