/*-------------------------------------------------------------------------
 *
 * verify.h
 *	  The coordinator's side of dpwin.verify() (verify.c), outside the
 *	  state machine.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_VERIFY_H
#define DPWIN_VERIFY_H

#include "invocation.h"

/* Digest the window on both sides, journal and return the verdict. */
extern void dpwin_verify_run(Coordinator *c);

#endif							/* DPWIN_VERIFY_H */
