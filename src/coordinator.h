/*-------------------------------------------------------------------------
 *
 * coordinator.h
 *	  The coordinator process: its background worker entry point, which
 *	  coordinator.c owns.  call.c launches it by name and includes nothing
 *	  of it; the declaration exports the symbol for the postmaster.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_COORDINATOR_H
#define DPWIN_COORDINATOR_H

/* The coordinator's entry point: runs one call's invocation (DpwinCallShared). */
extern PGDLLEXPORT void dpwin_coordinator_main(Datum main_arg);

#endif							/* DPWIN_COORDINATOR_H */
