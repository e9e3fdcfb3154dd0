/* dpwin — test-only access to the target lease (src/testing.c)
 *
 * These let an isolation spec play a runner from an ordinary session:
 * take a target's lease and bump its fencing epoch as a coordinator does,
 * release it, and attempt a fenced journal write with any epoch
 * (test/isolation/specs/lease_fencing.spec).  The leading underscore marks
 * them as not part of the user interface; only superusers may call them.
 */

/* Take the lease of dpwin.lease row target_id and bump its epoch; returns it. */
CREATE FUNCTION dpwin._lease_acquire(target_id integer) RETURNS bigint
	LANGUAGE C VOLATILE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin__lease_acquire';

/* Release it (the epoch stays); false if this session did not hold it. */
CREATE FUNCTION dpwin._lease_release(target_id integer) RETURNS boolean
	LANGUAGE C VOLATILE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin__lease_release';

/*
 * The fence of a journal write, without the write: locks the lease row FOR
 * SHARE until commit and fails with 55P03 when epoch is stale.
 */
CREATE FUNCTION dpwin._fenced_write(target_id integer, epoch bigint) RETURNS void
	LANGUAGE C VOLATILE PARALLEL UNSAFE
	AS 'MODULE_PATHNAME', 'dpwin__fenced_write';

REVOKE ALL ON FUNCTION dpwin._lease_acquire(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin._lease_release(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION dpwin._fenced_write(integer, bigint) FROM PUBLIC;
