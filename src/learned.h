/*-------------------------------------------------------------------------
 *
 * learned.h
 *	  What dpwin has learned about ClickHouse servers, in shared memory
 *	  (learned.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_LEARNED_H
#define DPWIN_LEARNED_H

/* at _PG_init, under shared_preload_libraries */
extern void dpwin_learned_init(void);

/* Is the fact named by key remembered? */
extern bool dpwin_learned_known(const char *key);

/* Remember it (an old fact may give way). */
extern void dpwin_learned_remember(const char *key);

/* Forget it: it turned out false. */
extern void dpwin_learned_forget(const char *key);

#endif							/* DPWIN_LEARNED_H */
