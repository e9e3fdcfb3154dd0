/*
 * sessions.c - engine sessions kept between statements.
 *
 * A server answers each HTTP request in a fresh query context made from
 * its global one: a copy of the account's settings with the URL's applied,
 * tens of microseconds.  An engine session costs more: opening one, its
 * SET statements and closing it took about 0.7 ms of the endpoint's CPU a
 * statement, which a server does not spend, and which weighed on the
 * clients that send many small statements (docs/endpoint.md).  So a session
 * whose statement left nothing behind is kept, under the exact text of
 * the set-up it was given (role, server defaults, URL settings, database),
 * and the next statement with the same set-up runs in it.  run.c decides
 * which statements leave a session as it found it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "chendpoint.h"

/* At most this many idle sessions; beyond that the oldest is closed. */
#define SESSIONS_IDLE_MAX 16

struct idle_session {
	struct engine_conn *ec;
	char	   *setup;
	struct idle_session *next;
};

static pthread_mutex_t sessions_lock = PTHREAD_MUTEX_INITIALIZER;
static struct idle_session *idle_head;	/* newest first */
static int	idle_count;
static int	sessions_closed;	/* at shutdown: keep nothing more */
static unsigned long sessions_reused;	/* statements run in a kept one */
static unsigned long sessions_opened;	/* and in a new one */

struct engine_conn *
session_take(const char *setup)
{
	struct idle_session **p, *s;
	struct engine_conn *ec = NULL;

	pthread_mutex_lock(&sessions_lock);
	for (p = &idle_head; (s = *p) != NULL; p = &s->next) {
		if (strcmp(s->setup, setup) == 0) {
			*p = s->next;
			idle_count--;
			ec = s->ec;
			free(s->setup);
			free(s);
			break;
		}
	}
	if (ec != NULL)
		sessions_reused++;
	else
		sessions_opened++;
	pthread_mutex_unlock(&sessions_lock);
	return ec;
}

void
session_keep(struct engine_conn *ec, const char *setup)
{
	struct idle_session *s, *oldest = NULL, **p;

	pthread_mutex_lock(&sessions_lock);
	if (sessions_closed) {
		pthread_mutex_unlock(&sessions_lock);
		engine_close(ec);
		return;
	}
	s = xmalloc(sizeof(*s));
	s->ec = ec;
	s->setup = xstrdup(setup);
	s->next = idle_head;
	idle_head = s;
	if (++idle_count > SESSIONS_IDLE_MAX) {
		for (p = &idle_head; (*p)->next != NULL; p = &(*p)->next)
			;
		oldest = *p;
		*p = NULL;
		idle_count--;
	}
	pthread_mutex_unlock(&sessions_lock);
	if (oldest != NULL) {
		engine_close(oldest->ec);
		free(oldest->setup);
		free(oldest);
	}
}

void
sessions_close_all(void)
{
	struct idle_session *s, *next;

	pthread_mutex_lock(&sessions_lock);
	sessions_closed = 1;
	s = idle_head;
	idle_head = NULL;
	idle_count = 0;
	pthread_mutex_unlock(&sessions_lock);
	for (; s != NULL; s = next) {
		next = s->next;
		engine_close(s->ec);
		free(s->setup);
		free(s);
	}
}

void
sessions_describe(struct buf *out)
{
	pthread_mutex_lock(&sessions_lock);
	buf_printf(out, "idle %d\nreused %lu\nopened %lu\n", idle_count,
	    sessions_reused, sessions_opened);
	pthread_mutex_unlock(&sessions_lock);
}
