/*
 * qlog.c - the query log: one line per request that reached the query
 * handler, kept in memory for GET /log and appended to --log FILE.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chendpoint.h"

static pthread_mutex_t qlog_lock = PTHREAD_MUTEX_INITIALIZER;
static char **qlog_lines;	/* lines qlog_first + 1 .. qlog_n */
static size_t qlog_first;	/* lines dropped from memory so far */
static size_t qlog_n;		/* lines written so far = last sequence */
static size_t qlog_cap;

void
qlog_append(uint64_t ms, const char *query_id, const char *user,
	    const char *status, const char *text, size_t tlen)
{
	struct buf line = {0};
	char head[64];

	if (tlen > LOG_TEXT_LIMIT)
		tlen = LOG_TEXT_LIMIT;
	pthread_mutex_lock(&qlog_lock);
	/* The sequence number is the line's position: 'since' never skips. */
	snprintf(head, sizeof(head), "%zu\t%llu\t", qlog_n + 1,
	    (unsigned long long) ms);
	buf_puts(&line, head);
	buf_put_escaped(&line, query_id, strlen(query_id));
	buf_puts(&line, "\t");
	buf_put_escaped(&line, user, strlen(user));
	buf_puts(&line, "\t");
	buf_puts(&line, status);
	buf_puts(&line, "\t");
	buf_put_escaped(&line, text, tlen);
	buf_puts(&line, "\n");
	if (qlog_n - qlog_first == LOG_LINES_KEPT) {
		/* A long-running demo: forget the older half. */
		size_t i, drop = LOG_LINES_KEPT / 2;

		for (i = 0; i < drop; i++)
			free(qlog_lines[i]);
		memmove(qlog_lines, qlog_lines + drop,
		    (LOG_LINES_KEPT - drop) * sizeof(char *));
		qlog_first += drop;
	}
	if (qlog_n - qlog_first == qlog_cap) {
		qlog_cap = qlog_cap ? qlog_cap * 2 : 1024;
		qlog_lines = xrealloc(qlog_lines, qlog_cap * sizeof(char *));
	}
	qlog_lines[qlog_n - qlog_first] = line.data;
	qlog_n++;
	if (g.logfile != NULL) {
		fputs(line.data, g.logfile);
		fflush(g.logfile);
	}
	pthread_mutex_unlock(&qlog_lock);
}

void
qlog_copy_since(size_t since, struct buf *out)
{
	size_t i;

	pthread_mutex_lock(&qlog_lock);
	for (i = since > qlog_first ? since : qlog_first; i < qlog_n; i++)
		buf_puts(out, qlog_lines[i - qlog_first]);
	pthread_mutex_unlock(&qlog_lock);
}
