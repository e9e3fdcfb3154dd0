/*-------------------------------------------------------------------------
 *
 * pg_compat.h
 *	  The one place, a header without a .c file, where dpwin's C code meets the
 *	  differences between the PostgreSQL majors it supports (15, 17, 18 and 19;
 *	  see the README).  The rest of the code is written against the newest API:
 *	  this header maps its spelling onto the older majors, or, where a
 *	  signature changed, gives a dpwin_ wrapper, keyed on PG_VERSION_NUM, so
 *	  that no other file needs an #if on the server version.  Include it after
 *	  postgres.h (dpwin.h does).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_PG_COMPAT_H
#define DPWIN_PG_COMPAT_H

#include "storage/lock.h"
#include "utils/acl.h"

/*
 * PostgreSQL 18 replaced pg_attribute_noreturn(), written after the
 * declarator, with pg_noreturn, written first in the declaration (a C11
 * function specifier or a C23 attribute).  The GCC attribute of the older
 * majors is valid in that first position too.
 */
#if PG_VERSION_NUM < 180000
#define pg_noreturn pg_attribute_noreturn()
#endif

/*
 * PostgreSQL 16 folded the per-object-kind ACL checks into
 * object_aclcheck(classid, ...); dpwin checks functions and foreign
 * servers only.
 */
#if PG_VERSION_NUM < 160000
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_proc.h"

static inline AclResult
object_aclcheck(Oid classid, Oid objectid, Oid roleid, AclMode mode)
{
	if (classid == ForeignServerRelationId)
		return pg_foreign_server_aclcheck(objectid, roleid, mode);
	Assert(classid == ProcedureRelationId);
	return pg_proc_aclcheck(objectid, roleid, mode);
}
#endif

/*
 * Does this backend hold exactly this lock mode on the tag?  PostgreSQL 17
 * added the orstronger argument to LockHeldByMe().
 */
static inline bool
dpwin_lock_held_by_me(const LOCKTAG *tag, LOCKMODE mode)
{
#if PG_VERSION_NUM >= 170000
	return LockHeldByMe(tag, mode, false);
#else
	return LockHeldByMe(tag, mode);
#endif
}

#endif							/* DPWIN_PG_COMPAT_H */
