/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  The chunk worker process: its background worker entry point, which
 *	  worker.c owns.  extraction.c launches it by name and includes nothing
 *	  of it; the declaration exports the symbol for the postmaster.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_WORKER_H
#define DPWIN_WORKER_H

/* A chunk worker's entry point: works the extraction's chunk queue. */
extern PGDLLEXPORT void dpwin_worker_main(Datum main_arg);

#endif							/* DPWIN_WORKER_H */
