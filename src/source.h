/*-------------------------------------------------------------------------
 *
 * source.h
 *	  The PostgreSQL side of extraction (source.c): one exported snapshot held by the
 *	  coordinator, imported by every chunk worker for every chunk, and a
 *	  query over one chunk's half-open range run into a receiver.
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
 * Worker: in a REPEATABLE READ transaction that imports the snapshot
 * before taking any other, run SELECT of the route's columns WHERE
 * window_column >= lo AND window_column < hi into `dest`, row by row, and
 * commit.  An error raised by `dest` leaves the transaction for the caller
 * to abort.
 */
extern void dpwin_source_read(const DpwinRoute *route, const char *snapshot_name,
							  TimestampTz lo, TimestampTz hi, DestReceiver *dest);

#endif							/* DPWIN_SOURCE_H */
