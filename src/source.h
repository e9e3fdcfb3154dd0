/*-------------------------------------------------------------------------
 *
 * source.h
 *	  The PostgreSQL side of extraction: one exported snapshot held by the
 *	  coordinator, imported by every chunk worker for every chunk, and an
 *	  SPI cursor over one chunk's half-open range.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_SOURCE_H
#define DPWIN_SOURCE_H

#include "executor/spi.h"

#include "route.h"

/*
 * Coordinator: start a REPEATABLE READ transaction and export its snapshot;
 * returns the snapshot's name.  The transaction stays open until
 * dpwin_snapshot_close().
 */
extern char *dpwin_snapshot_export(void);
extern void dpwin_snapshot_close(void);

/*
 * Worker: start a REPEATABLE READ transaction that imports the snapshot
 * before taking any other, connect SPI and open a cursor over
 * window_column >= lo AND window_column < hi of the route's columns.
 * Rows come from dpwin_source_fetch() in batches until it returns 0.
 */
extern Portal dpwin_source_open(const DpwinRoute *route, const char *snapshot_name,
								TimestampTz lo, TimestampTz hi);
extern uint64 dpwin_source_fetch(Portal portal, int batch_rows);
extern void dpwin_source_close(Portal portal);

#endif							/* DPWIN_SOURCE_H */
