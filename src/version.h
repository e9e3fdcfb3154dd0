/*-------------------------------------------------------------------------
 *
 * version.h
 *	  Which versions of dpwin's SQL objects this library works with
 *	  (version.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_VERSION_H
#define DPWIN_VERSION_H

/*
 * Fail, before anything else happens, unless the current database's
 * dpwin extension (pg_extension.extversion) is at a version this library
 * supports.  Needs a transaction.
 */
extern void dpwin_check_sql_version(void);

#endif							/* DPWIN_VERSION_H */
