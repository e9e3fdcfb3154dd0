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

/* Is the fact named by key remembered, with this value? */
extern bool dpwin_learned_known(const char *key, const char *value);

/* Remember key's value (the oldest fact may give way). */
extern void dpwin_learned_remember(const char *key, const char *value);

/* Forget key's fact: it turned out false. */
extern void dpwin_learned_forget(const char *key);

#endif							/* DPWIN_LEARNED_H */
