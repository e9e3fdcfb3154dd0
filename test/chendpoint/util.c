/*
 * util.c - small helpers of the endpoint: memory that never fails (out of
 * memory is fatal here), growing buffers, SQL quoting, clocks, ids.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "chendpoint.h"

void
die_oom(void)
{
	static const char msg[] = "chendpoint: out of memory\n";

	/* write(2): no allocation on this path. */
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
		_exit(70);
	abort();
}

void *
xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (p == NULL)
		die_oom();
	return p;
}

void *
xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (p == NULL)
		die_oom();
	return p;
}

char *
xstrndup(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *
xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

char *
xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		die_oom();
	return s;
}

void
buf_append(struct buf *b, const void *p, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;

		while (cap < b->len + n + 1)
			cap *= 2;
		b->data = xrealloc(b->data, cap);
		b->cap = cap;
	}
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';	/* always NUL-terminated for convenience */
}

void
buf_puts(struct buf *b, const char *s)
{
	buf_append(b, s, strlen(s));
}

void
buf_free(struct buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

uint64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

void
sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Case-insensitive search for needle in a byte string. */
int
contains_nocase(const char *hay, size_t hlen, const char *needle)
{
	size_t nlen = strlen(needle), i;

	if (nlen == 0)
		return 1;
	for (i = 0; i + nlen <= hlen; i++)
		if (strncasecmp(hay + i, needle, nlen) == 0)
			return 1;
	return 0;
}

void
make_uuid(char out[37])
{
	unsigned char b[16];
	size_t got = 0;

	while (got < sizeof(b)) {
		ssize_t n = getrandom(b + got, sizeof(b) - got, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			/* No entropy source: fall back to time and address. */
			uint64_t t = now_ms() ^ (uint64_t) (uintptr_t) out;

			memcpy(b, &t, sizeof(t));
			memcpy(b + 8, &t, sizeof(t));
			break;
		}
		got += (size_t) n;
	}
	b[6] = (unsigned char) ((b[6] & 0x0f) | 0x40);	/* version 4 */
	b[8] = (unsigned char) ((b[8] & 0x3f) | 0x80);	/* RFC 4122 variant */
	snprintf(out, 37,
	    "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
	    "%02x%02x%02x%02x%02x%02x",
	    b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
	    b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* Append s as a single-quoted ClickHouse string literal. */
void
buf_put_literal(struct buf *b, const char *s, size_t n)
{
	size_t i;

	buf_append(b, "'", 1);
	for (i = 0; i < n; i++) {
		char c = s[i];

		if (c == '\\' || c == '\'')
			buf_append(b, "\\", 1);
		buf_append(b, &c, 1);
	}
	buf_append(b, "'", 1);
}

/* Append s as a `quoted` identifier. */
void
buf_put_ident(struct buf *b, const char *s)
{
	buf_append(b, "`", 1);
	for (; *s; s++) {
		if (*s == '\\' || *s == '`')
			buf_append(b, "\\", 1);
		buf_append(b, s, 1);
	}
	buf_append(b, "`", 1);
}

/* Escape backslash, tab and newline: one query per log line. */
void
buf_put_escaped(struct buf *b, const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		switch (s[i]) {
		case '\\':
			buf_puts(b, "\\\\");
			break;
		case '\t':
			buf_puts(b, "\\t");
			break;
		case '\n':
			buf_puts(b, "\\n");
			break;
		default:
			buf_append(b, s + i, 1);
		}
	}
}

void
buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		die_oom();
	buf_append(b, s, (size_t) n);
	free(s);
}

/* A clock for durations: unaffected by changes of the wall clock. */
uint64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* Random lower-case letters and digits, as the server's exception tags. */
void
make_tag(char out[EXCEPTION_TAG_LEN + 1])
{
	static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	unsigned char b[EXCEPTION_TAG_LEN];
	size_t i;

	if (getrandom(b, sizeof(b), 0) != (ssize_t) sizeof(b)) {
		uint64_t t = mono_ms() ^ (uint64_t) (uintptr_t) out;

		for (i = 0; i < sizeof(b); i++)
			b[i] = (unsigned char) (t >> ((i % 8) * 8)) ^ (unsigned char) i;
	}
	for (i = 0; i < EXCEPTION_TAG_LEN; i++)
		out[i] = alphabet[b[i] % (sizeof(alphabet) - 1)];
	out[EXCEPTION_TAG_LEN] = '\0';
}

int
parse_long(const char *s, long *out)
{
	char *end;
	long v;

	if (s == NULL || *s == '\0')
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return -1;
	*out = v;
	return 0;
}
