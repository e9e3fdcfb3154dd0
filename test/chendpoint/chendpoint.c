/*
 * chendpoint - the ClickHouse HTTP interface over the embedded ClickHouse
 * engine (chDB).
 *
 * A test fixture (and the demo's embedded default): it speaks the HTTP
 * protocol of clickhouse-server closely enough that a client cannot tell
 * the difference for the features it uses, and it has a second, test-only
 * "control" port that can inject faults and exposes a log of the queries
 * received.  See docs/endpoint.md.
 *
 * Threads: libmicrohttpd runs one thread per client connection.  Each
 * request opens its own engine session (cheap, well under a millisecond),
 * so URL settings, the default database and GET's readonly mode never leak
 * between requests.  An INSERT whose rows follow the query text is run in
 * a helper thread as "INSERT ... FROM INFILE '<fifo>'", and the connection
 * thread writes the request body into that FIFO as it arrives, so loads
 * stream with constant memory.  One "anchor" session stays open for the
 * life of the process so the embedded server is not restarted between
 * requests; all sessions are closed before exit.
 */
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "sqlscan.h"

/* ClickHouse's max_query_size: the head of an INSERT must fit in it. */
#define HEAD_PROBE_LIMIT ((size_t) 256 * 1024)
/* Largest body accepted as query text (not INSERT data). */
#define QUERY_BUFFER_LIMIT ((size_t) 256 * 1024 * 1024)
/* Query text kept in the query log. */
#define LOG_TEXT_LIMIT ((size_t) 1024 * 1024)
/* Lines kept in memory for GET /log (the --log file keeps all). */
#define LOG_LINES_KEPT ((size_t) 200000)
/* ClickHouse runs queries on deep stacks; give our threads room too. */
#define THREAD_STACK ((size_t) 16 * 1024 * 1024)

/* ------------------------------------------------------------------ */
/* Small utilities                                                     */
/* ------------------------------------------------------------------ */

static void
die_oom(void)
{
	static const char msg[] = "chendpoint: out of memory\n";

	/* write(2): no allocation on this path. */
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
		_exit(70);
	abort();
}

static void *
xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (p == NULL)
		die_oom();
	return p;
}

static void *
xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (p == NULL)
		die_oom();
	return p;
}

static char *
xstrndup(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

static char *
xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

static char *
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

struct buf {
	char *data;
	size_t len, cap;
};

static void
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

static void
buf_puts(struct buf *b, const char *s)
{
	buf_append(b, s, strlen(s));
}

static void
buf_free(struct buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

static uint64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static void
sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Case-insensitive search for needle in a byte string. */
static int
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

static void
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
static void
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
static void
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

/* ------------------------------------------------------------------ */
/* Global state                                                        */
/* ------------------------------------------------------------------ */

static struct {
	const char *user;
	const char *password;
	char hostname[256];
	char timezone[128];
	char engine_version[64];
	char fifo_dir[PATH_MAX];
	FILE *logfile;
	struct engine_conn *anchor;
	atomic_int shutting_down;
	atomic_int executing;	/* statements running in the engine */
	atomic_ulong fifo_seq;
} g;

/* ------------------------------------------------------------------ */
/* Error codes and HTTP statuses                                       */
/* ------------------------------------------------------------------ */

/*
 * How clickhouse-server's HTTP handler turns an exception code into an
 * HTTP status (exceptionCodeToHTTPStatus in src/Server/HTTP/), by error
 * name.  Codes are looked up in the engine's own system.errors at start,
 * so the table follows the engine version; the numbers here are the
 * fallback and were checked against the engine (26.5).
 */
static const struct {
	const char *name;
	int code;
	int status;
} status_map[] = {
	{"REQUIRED_PASSWORD", 194, 401},
	{"UNKNOWN_USER", 192, 403},
	{"WRONG_PASSWORD", 193, 403},
	{"AUTHENTICATION_FAILED", 516, 403},
	{"SET_NON_GRANTED_ROLE", 512, 403},
	{"ACCESS_DENIED", 497, 403},
	{"BAD_ARGUMENTS", 36, 400},
	{"CANNOT_COMPILE_REGEXP", 427, 400},
	{"CANNOT_PARSE_TEXT", 6, 400},
	{"CANNOT_PARSE_ESCAPE_SEQUENCE", 25, 400},
	{"CANNOT_PARSE_QUOTED_STRING", 26, 400},
	{"CANNOT_PARSE_DATE", 38, 400},
	{"CANNOT_PARSE_DATETIME", 41, 400},
	{"CANNOT_PARSE_NUMBER", 72, 400},
	{"CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING", 441, 400},
	{"CANNOT_PARSE_IPV4", 675, 400},
	{"CANNOT_PARSE_IPV6", 676, 400},
	{"CANNOT_PARSE_INPUT_ASSERTION_FAILED", 27, 400},
	{"CANNOT_PARSE_UUID", 376, 400},
	{"DUPLICATE_COLUMN", 15, 400},
	{"ILLEGAL_COLUMN", 44, 400},
	{"UNKNOWN_ELEMENT_IN_AST", 37, 400},
	{"UNKNOWN_TYPE_OF_AST_NODE", 123, 400},
	{"THERE_IS_NO_COLUMN", 8, 400},
	{"TOO_DEEP_AST", 167, 400},
	{"TOO_BIG_AST", 168, 400},
	{"UNEXPECTED_AST_STRUCTURE", 223, 400},
	{"SYNTAX_ERROR", 62, 400},
	{"INCORRECT_DATA", 117, 400},
	{"TYPE_MISMATCH", 53, 400},
	{"VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE", 321, 400},
	{"UNKNOWN_TABLE", 60, 404},
	{"UNKNOWN_FUNCTION", 46, 404},
	{"UNKNOWN_IDENTIFIER", 47, 404},
	{"UNKNOWN_TYPE", 50, 404},
	{"UNKNOWN_STORAGE", 56, 404},
	{"UNKNOWN_DATABASE", 81, 404},
	{"UNKNOWN_SETTING", 115, 404},
	{"UNKNOWN_DIRECTION_OF_SORTING", 152, 404},
	{"UNKNOWN_AGGREGATE_FUNCTION", 63, 404},
	{"UNKNOWN_FORMAT", 73, 404},
	{"UNKNOWN_DATABASE_ENGINE", 336, 404},
	{"UNKNOWN_TYPE_OF_QUERY", 78, 404},
	{"UNKNOWN_ROLE", 511, 404},
	{"QUERY_IS_TOO_LARGE", 229, 413},
	{"NOT_IMPLEMENTED", 48, 501},
	{"SOCKET_TIMEOUT", 209, 503},
	{"CANNOT_OPEN_FILE", 76, 503},
	{"HTTP_LENGTH_REQUIRED", 381, 411},
	{"TIMEOUT_EXCEEDED", 159, 408},
	{"CANNOT_SCHEDULE_TASK", 439, 503},
	{"UNSUPPORTED_MEDIA_TYPE", -1, 415},	/* newer servers only */
};

#define N_STATUS_MAP (sizeof(status_map) / sizeof(status_map[0]))

/* Codes resolved from the engine, parallel to status_map. */
static int status_code_of[N_STATUS_MAP];

/* Every error name the engine knows (for injected faults' messages). */
static struct {
	int code;
	char *name;
} *error_names;
static size_t n_error_names;

static const char *
error_name(int code)
{
	size_t i;

	for (i = 0; i < n_error_names; i++)
		if (error_names[i].code == code)
			return error_names[i].name;
	for (i = 0; i < N_STATUS_MAP; i++)
		if (status_code_of[i] == code)
			return status_map[i].name;
	return "UNKNOWN_EXCEPTION";
}

static int
http_status_for(int code)
{
	size_t i;

	for (i = 0; i < N_STATUS_MAP; i++)
		if (status_code_of[i] == code && code > 0)
			return status_map[i].status;
	return 500;
}

/* Load code names from the engine; keeps the fallbacks on failure. */
static void
load_error_names(struct engine_conn *conn)
{
	static const char q[] =
	    "SELECT DISTINCT code, name FROM system.errors ORDER BY code "
	    "SETTINGS system_events_show_zero_values = 1";
	struct engine_result res;
	const char *p, *end;
	size_t i, j;

	for (i = 0; i < N_STATUS_MAP; i++)
		status_code_of[i] = status_map[i].code;
	if (engine_query(conn, q, strlen(q), "TabSeparated", &res) != 0) {
		engine_result_free(&res);
		return;
	}
	p = res.data;
	end = res.data + res.len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t) (end - p));
		const char *tab;

		if (nl == NULL)
			nl = end;
		tab = memchr(p, '\t', (size_t) (nl - p));
		if (tab != NULL) {
			error_names = xrealloc(error_names,
			    (n_error_names + 1) * sizeof(*error_names));
			error_names[n_error_names].code = atoi(p);
			error_names[n_error_names].name =
			    xstrndup(tab + 1, (size_t) (nl - tab - 1));
			n_error_names++;
		}
		p = nl + 1;
	}
	engine_result_free(&res);
	for (i = 0; i < N_STATUS_MAP; i++)
		for (j = 0; j < n_error_names; j++)
			if (strcmp(error_names[j].name, status_map[i].name) == 0)
				status_code_of[i] = error_names[j].code;
}

/* Content-Type clickhouse-server sends for an output format. */
static const char *
content_type_for(const char *fmt)
{
	char f[64];
	size_t i;

	for (i = 0; fmt[i] && i + 1 < sizeof(f); i++)
		f[i] = (char) ((fmt[i] >= 'A' && fmt[i] <= 'Z') ?
		    fmt[i] - 'A' + 'a' : fmt[i]);
	f[i] = '\0';
	if (strncmp(f, "tabseparated", 12) == 0 || strncmp(f, "tsv", 3) == 0)
		return "text/tab-separated-values; charset=UTF-8";
	if (strncmp(f, "csv", 3) == 0)
		return strstr(f, "withnames") ?
		    "text/csv; charset=UTF-8; header=present" :
		    "text/csv; charset=UTF-8; header=absent";
	if (strncmp(f, "json", 4) == 0 || strcmp(f, "ndjson") == 0)
		return "application/json; charset=UTF-8";
	if (strcmp(f, "xml") == 0)
		return "application/xml; charset=UTF-8";
	if (strncmp(f, "rowbinary", 9) == 0 || strcmp(f, "native") == 0 ||
	    strncmp(f, "parquet", 7) == 0 || strncmp(f, "arrow", 5) == 0 ||
	    strcmp(f, "orc") == 0 || strcmp(f, "avro") == 0 ||
	    strncmp(f, "protobuf", 8) == 0 || strcmp(f, "capnproto") == 0 ||
	    strcmp(f, "msgpack") == 0 || strcmp(f, "rawblob") == 0 ||
	    strcmp(f, "bsoneachrow") == 0 || strcmp(f, "npy") == 0)
		return "application/octet-stream";
	return "text/plain; charset=UTF-8";
}

/* ------------------------------------------------------------------ */
/* Query log (control port: GET /log)                                  */
/* ------------------------------------------------------------------ */

static pthread_mutex_t qlog_lock = PTHREAD_MUTEX_INITIALIZER;
static char **qlog_lines;	/* lines qlog_first + 1 .. qlog_n */
static size_t qlog_first;	/* lines dropped from memory so far */
static size_t qlog_n;		/* lines written so far = last sequence */
static size_t qlog_cap;

/* Escape backslash, tab and newline: one query per log line. */
static void
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

static void
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

/* ------------------------------------------------------------------ */
/* Faults (control port: POST /fault)                                  */
/* ------------------------------------------------------------------ */

enum fault_mode {
	FAULT_NONE = 0,
	FAULT_ERROR,
	FAULT_LOST,
	FAULT_DELAY,
	FAULT_REFUSE
};

struct fault {
	char *pattern;
	long count;
	enum fault_mode mode;
	int code;
	long ms;
	struct fault *next;
};

struct fault_hit {
	enum fault_mode mode;
	int code;
	long ms;
	char pattern[256];
};

static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fault *faults;		/* in order of registration */
static long refuse_count;

/* The first pending fault matching text, consumed; mode NONE if none. */
static void
fault_take(const char *text, size_t len, struct fault_hit *hit)
{
	struct fault **pp, *f;

	memset(hit, 0, sizeof(*hit));
	pthread_mutex_lock(&fault_lock);
	for (pp = &faults; (f = *pp) != NULL; pp = &f->next) {
		if (!contains_nocase(text, len, f->pattern))
			continue;
		hit->mode = f->mode;
		hit->code = f->code;
		hit->ms = f->ms;
		snprintf(hit->pattern, sizeof(hit->pattern), "%s", f->pattern);
		if (--f->count <= 0) {
			*pp = f->next;
			free(f->pattern);
			free(f);
		}
		break;
	}
	pthread_mutex_unlock(&fault_lock);
}

static void
faults_clear(void)
{
	pthread_mutex_lock(&fault_lock);
	while (faults != NULL) {
		struct fault *f = faults;

		faults = f->next;
		free(f->pattern);
		free(f);
	}
	refuse_count = 0;
	pthread_mutex_unlock(&fault_lock);
}

/* ------------------------------------------------------------------ */
/* Requests on the main port                                           */
/* ------------------------------------------------------------------ */

enum body_mode {
	BODY_NONE,		/* no body expected (GET, static pages) */
	BODY_HEAD,		/* no ?query=: collecting the query head */
	BODY_QUERY,		/* body is (part of) the query text */
	BODY_STREAM,		/* body is INSERT data, streamed to a FIFO */
	BODY_DISCARD		/* answer known already; body is ignored */
};

struct kv {
	char *key;
	char *value;
};

struct request {
	uint64_t received_ms;
	int is_get;		/* GET or HEAD: readonly, like the server */
	int is_static;		/* answered with a fixed page */
	unsigned int static_status;
	char *static_body;
	const char *static_type;
	char *query_id;
	char *user;
	char *database;		/* NULL: the session's default */
	char *format;		/* default output format */
	char *content_encoding;
	struct kv *settings;	/* URL settings and param_* in URL order */
	size_t n_settings;
	int has_query_param;
	struct buf qparam;	/* the ?query= text */
	int qparam_nl;		/* a line break was appended to qparam */
	struct buf body;	/* body bytes kept as query text / head */
	enum body_mode mode;
	int answered;		/* a response was queued */
	int logged;

	/* Fault chosen for this request. */
	struct fault_hit fault;
	int fault_checked;

	/* Outcome. */
	struct engine_result res;
	int failed;
	int err_code;
	char *err_msg;
	char *out_format;	/* format of the result, NULL if none */

	/* Streaming INSERT. */
	struct insert_split split;
	char *fifo_path;
	int fifo_fd;
	int sink_failed;	/* the engine stopped reading: drop data */
	enum data_skip skip;	/* "data starts after the first newline" */
	char *exec_query;	/* rewritten INSERT ... FROM INFILE */
	char *log_text;		/* query text shown in the log */
	size_t log_len;
	pthread_t thread;
	int thread_started;
	int thread_joined;
	atomic_int done;	/* the statement has finished */
};

static void
set_error(struct request *r, int code, char *msg)
{
	free(r->err_msg);
	r->failed = 1;
	r->err_code = code;
	r->err_msg = msg;
}

static void
set_error_fmt(struct request *r, int code, const char *fmt, ...)
{
	va_list ap;
	char *detail, *msg;

	va_start(ap, fmt);
	if (vasprintf(&detail, fmt, ap) < 0)
		die_oom();
	va_end(ap);
	msg = xasprintf("Code: %d. DB::Exception: %s. (%s)", code, detail,
	    error_name(code));
	free(detail);
	set_error(r, code, msg);
}

/* A fixed page, sent once the request (and any body) is in. */
static void
set_static(struct request *r, unsigned int status, char *body,
	   const char *content_type)
{
	r->is_static = 1;
	r->mode = BODY_DISCARD;
	r->static_status = status;
	r->static_body = body;
	r->static_type = content_type;
}

/* The query text as the log and fault patterns see it. */
static void
set_log_text(struct request *r, const char *text, size_t len)
{
	free(r->log_text);
	r->log_text = xstrndup(text, len);
	r->log_len = len;
}

static void
log_request(struct request *r, const char *status)
{
	if (r->logged)
		return;
	r->logged = 1;
	qlog_append(r->received_ms, r->query_id ? r->query_id : "",
	    r->user ? r->user : "", status, r->log_text ? r->log_text : "",
	    r->log_len);
}

/* ---- parameters ---- */

/* Parameters the server consumes itself rather than as settings. */
static const char *const reserved_params[] = {
	"compress", "decompress", "user", "password", "quota_key",
	"query_id", "stacktrace", "buffer_size", "wait_end_of_query",
	"session_id", "session_timeout", "session_check",
	"client_protocol_version", "close_session", "role",
	"query", "database", "default_format", NULL
};

static int
is_reserved_param(const char *key)
{
	int i;

	for (i = 0; reserved_params[i]; i++)
		if (strcmp(key, reserved_params[i]) == 0)
			return 1;
	return 0;
}

struct arg_state {
	struct request *r;
	const char *user;	/* ?user= */
	const char *password;	/* ?password= */
	int has_credentials;	/* user, password or quota_key given */
	const char *query_id;
	int compress;
	int decompress;
};

static enum MHD_Result
collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
	    size_t key_size, const char *value, size_t value_size)
{
	struct arg_state *st = cls;
	struct request *r = st->r;

	(void) kind;
	(void) key_size;
	if (key == NULL || key[0] == '\0')
		return MHD_YES;	/* "?&a=b": skipped, like the server */
	if (value == NULL) {
		value = "";
		value_size = 0;
	}
	/* A repeated parameter: the first one counts, as in the server. */
	if (strcmp(key, "query") == 0) {
		if (!r->has_query_param)
			buf_append(&r->qparam, value, value_size);
		r->has_query_param = 1;
	} else if (strcmp(key, "database") == 0) {
		if (r->database == NULL)
			r->database = xstrndup(value, value_size);
	} else if (strcmp(key, "default_format") == 0) {
		if (r->format == NULL)
			r->format = xstrndup(value, value_size);
	} else if (strcmp(key, "user") == 0) {
		if (st->user == NULL)
			st->user = value;
		st->has_credentials = 1;
	} else if (strcmp(key, "password") == 0) {
		if (st->password == NULL)
			st->password = value;
		st->has_credentials = 1;
	} else if (strcmp(key, "quota_key") == 0) {
		st->has_credentials = 1;
	} else if (strcmp(key, "query_id") == 0) {
		if (st->query_id == NULL)
			st->query_id = value;
	} else if (strcmp(key, "compress") == 0) {
		st->compress = strcmp(value, "0") != 0 && value_size > 0;
	} else if (strcmp(key, "decompress") == 0) {
		st->decompress = strcmp(value, "0") != 0 && value_size > 0;
	} else if (!is_reserved_param(key)) {
		/* Everything else is a setting (or a param_ query parameter). */
		r->settings = xrealloc(r->settings,
		    (r->n_settings + 1) * sizeof(*r->settings));
		r->settings[r->n_settings].key = xstrdup(key);
		r->settings[r->n_settings].value = xstrndup(value, value_size);
		r->n_settings++;
	}
	return MHD_YES;
}

static int
valid_setting_name(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		    (*s >= '0' && *s <= '9') || *s == '_'))
			return 0;
	return 1;
}

/*
 * Authenticate as clickhouse-server does: X-ClickHouse-User/Key headers,
 * or HTTP Basic, or ?user=&password=; mixing schemes is an error; no
 * credentials at all means user "default" with an empty password.
 * Returns 0 on success, else sets the error.
 */
static int
authenticate(struct MHD_Connection *c, struct request *r,
	     struct arg_state *st)
{
	const char *h_user =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-ClickHouse-User");
	const char *h_key =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-ClickHouse-Key");
	const char *h_quota =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-ClickHouse-Quota");
	const char *authz =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	int has_headers = (h_user && *h_user) || (h_key && *h_key) ||
	    (h_quota && *h_quota);
	char *user = NULL, *password = NULL;
	int ok;

	if (has_headers) {
		if (authz != NULL) {
			set_error_fmt(r, 516, "Invalid authentication: it is "
			    "not allowed to use X-ClickHouse HTTP headers and "
			    "other authentication methods simultaneously");
			return -1;
		}
		if (st->has_credentials) {
			set_error_fmt(r, 516, "Invalid authentication: it is "
			    "not allowed to use X-ClickHouse HTTP headers and "
			    "authentication via parameters simultaneously");
			return -1;
		}
		user = xstrdup(h_user ? h_user : "");
		password = xstrdup(h_key ? h_key : "");
		if (user[0] == '\0') {
			free(user);
			user = xstrdup("default");
		}
	} else if (authz != NULL) {
		char *pw = NULL;
		char *u;

		if (st->has_credentials) {
			set_error_fmt(r, 516, "Invalid authentication: it is "
			    "not allowed to use Authorization HTTP header and "
			    "authentication via parameters simultaneously");
			return -1;
		}
		if (strncasecmp(authz, "Basic ", 6) != 0) {
			size_t n = strcspn(authz, " ");

			set_error_fmt(r, 516, "Invalid authentication: '%.*s' "
			    "HTTP Authorization scheme is not supported",
			    (int) n, authz);
			return -1;
		}
		u = MHD_basic_auth_get_username_password(c, &pw);
		user = xstrdup(u ? u : "");
		password = xstrdup(pw ? pw : "");
		if (u)
			MHD_free(u);
		if (pw)
			MHD_free(pw);
	} else {
		user = xstrdup(st->user ? st->user : "default");
		password = xstrdup(st->password ? st->password : "");
	}
	r->user = user;
	ok = strcmp(user, g.user) == 0 && strcmp(password, g.password) == 0;
	free(password);
	if (!ok) {
		set_error_fmt(r, 516, "%s: Authentication failed: password is "
		    "incorrect, or there is no user with such name", user);
		return -1;
	}
	return 0;
}

/* ---- running a statement ---- */

/*
 * Prepare a fresh engine session the way the server prepares a query
 * context: readonly for GET, then the URL settings, then the database.
 */
static int
setup_session(struct engine_conn *ec, struct request *r)
{
	char *err = NULL;
	int code = 0;
	size_t i;

	/*
	 * The engine starts with clickhouse-local's defaults; put back the
	 * server's where they differ (system.settings WHERE changed).
	 */
	if (engine_exec(ec, r->is_get ?
	    "SET implicit_select = 0, allow_introspection_functions = 0, "
	    "readonly = 2" :
	    "SET implicit_select = 0, allow_introspection_functions = 0",
	    &err, &code) != 0)
		goto fail;
	if (r->n_settings > 0) {
		struct buf sql = {0};
		int rc;

		buf_puts(&sql, "SET ");
		for (i = 0; i < r->n_settings; i++) {
			const char *k = r->settings[i].key;
			const char *v = r->settings[i].value;

			if (!valid_setting_name(k)) {
				buf_free(&sql);
				set_error_fmt(r, 115, "Unknown setting '%s'", k);
				return -1;
			}
			if (i > 0)
				buf_puts(&sql, ", ");
			buf_puts(&sql, k);
			buf_puts(&sql, " = ");
			buf_put_literal(&sql, v, strlen(v));
		}
		rc = engine_exec(ec, sql.data, &err, &code);
		buf_free(&sql);
		if (rc != 0)
			goto fail;
	}
	if (r->database != NULL && r->database[0] != '\0') {
		struct buf sql = {0};
		int rc;

		buf_puts(&sql, "USE ");
		buf_put_ident(&sql, r->database);
		rc = engine_exec(ec, sql.data, &err, &code);
		buf_free(&sql);
		if (rc != 0)
			goto fail;
	}
	return 0;
fail:
	set_error(r, code, err);
	return -1;
}

/* GET is readonly; the server explains that in its message. */
static void
explain_readonly(struct request *r)
{
	static const char what[] = "Cannot execute query in readonly mode.";
	static const char why[] = " For queries over HTTP, method GET implies "
	    "readonly. You should use method POST for modifying queries.";
	char *at, *msg;
	size_t pre;

	if (!r->is_get || r->err_code != 164 || r->err_msg == NULL)
		return;
	at = strstr(r->err_msg, what);
	if (at == NULL)
		return;
	pre = (size_t) (at - r->err_msg) + strlen(what);
	msg = xasprintf("%.*s%s%s", (int) pre, r->err_msg, why,
	    r->err_msg + pre);
	free(r->err_msg);
	r->err_msg = msg;
}

static void
execute(struct request *r, const char *query, size_t len)
{
	struct engine_conn *ec;

	if (r->fault.mode == FAULT_DELAY) {
		long left = r->fault.ms;

		/* Sleep in slices so that shutdown is not held up. */
		while (left > 0 && !atomic_load(&g.shutting_down)) {
			long step = left > 100 ? 100 : left;

			sleep_ms(step);
			left -= step;
		}
	}
	if (atomic_load(&g.shutting_down)) {
		set_error_fmt(r, 210, "Server is shutting down");
		return;
	}
	ec = engine_connect();
	if (ec == NULL) {
		set_error_fmt(r, 1001, "cannot open an engine session");
		return;
	}
	atomic_fetch_add(&g.executing, 1);
	if (setup_session(ec, r) == 0) {
		const char *fmt = r->format && r->format[0] ?
		    r->format : "TabSeparated";

		if (engine_query(ec, query, len, fmt, &r->res) != 0) {
			set_error(r, r->res.code, r->res.error);
			r->res.error = NULL;
			engine_result_free(&r->res);
		}
	}
	atomic_fetch_sub(&g.executing, 1);
	engine_close(ec);
	explain_readonly(r);
}

/* Decide the output format of a non-INSERT statement. */
static void
decide_output_format(struct request *r, const char *text, size_t len)
{
	static const char *const no_output[] = {
		"INSERT", "CREATE", "DROP", "ALTER", "RENAME", "EXCHANGE",
		"TRUNCATE", "SET", "USE", "OPTIMIZE", "SYSTEM", "ATTACH",
		"DETACH", "GRANT", "REVOKE", "UNDROP", "DELETE", "UPDATE",
		NULL
	};
	char kw[32], fmt[128];
	int i;

	sql_first_keyword(text, len, kw, sizeof(kw));
	for (i = 0; no_output[i]; i++)
		if (strcmp(kw, no_output[i]) == 0)
			return;
	if (sql_output_format(text, len, fmt, sizeof(fmt)))
		r->out_format = xstrdup(fmt);
	else
		r->out_format = xstrdup(r->format && r->format[0] ?
		    r->format : "TabSeparated");
}

/* Consume the fault registered for this statement, if any. */
static void
check_fault(struct request *r)
{
	if (r->fault_checked)
		return;
	r->fault_checked = 1;
	fault_take(r->log_text ? r->log_text : "", r->log_len, &r->fault);
	if (r->fault.mode == FAULT_ERROR)
		set_error_fmt(r, r->fault.code, "injected fault (pattern "
		    "'%s', mode error)", r->fault.pattern);
}

/*
 * Run a statement whose text is complete (not a streamed INSERT).  The log
 * shows its first log_len bytes (without a line break added after
 * ?query= when no body followed).
 */
static void
run_buffered(struct request *r, const char *text, size_t len,
	     size_t log_len)
{
	set_log_text(r, text, log_len);
	check_fault(r);
	if (r->failed)
		return;
	if (sql_is_empty(text, len)) {
		set_error_fmt(r, 62, "Empty query");
		return;
	}
	if (sql_is_multi_statement(text, len)) {
		set_error_fmt(r, 62, "Syntax error (Multi-statements are not "
		    "allowed)");
		return;
	}
	decide_output_format(r, text, len);
	execute(r, text, len);
}

/* ---- streaming INSERT through a FIFO ---- */

static void *
stream_thread(void *arg)
{
	struct request *r = arg;

	execute(r, r->exec_query, strlen(r->exec_query));
	atomic_store(&r->done, 1);
	return NULL;
}

/*
 * Open the FIFO's write end once the engine has opened the read end.
 * Non-blocking open fails with ENXIO until a reader exists, so a statement
 * that fails before reading (unknown table, say) cannot hang us.
 * Returns 0 when open, -1 when the statement finished without reading.
 */
static int
fifo_open_writer(struct request *r)
{
	long wait_us = 100;

	while (r->fifo_fd < 0) {
		int fd = open(r->fifo_path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);

		if (fd >= 0) {
			r->fifo_fd = fd;
			break;
		}
		if (errno != ENXIO && errno != EINTR)
			return -1;
		if (atomic_load(&r->done))
			return -1;
		usleep((useconds_t) wait_us);
		if (wait_us < 10000)
			wait_us *= 2;
	}
	return 0;
}

/* Write data to the engine; backpressure comes from the pipe. */
static void
fifo_write(struct request *r, const char *p, size_t n)
{
	if (r->sink_failed || n == 0)
		return;
	if (fifo_open_writer(r) != 0) {
		r->sink_failed = 1;
		return;
	}
	while (n > 0) {
		ssize_t w = write(r->fifo_fd, p, n);

		if (w > 0) {
			p += w;
			n -= (size_t) w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			struct pollfd pfd = {r->fifo_fd, POLLOUT, 0};

			/* Wake up now and then: the reader may have died. */
			if (atomic_load(&r->done) ||
			    atomic_load(&g.shutting_down)) {
				r->sink_failed = 1;
				return;
			}
			if (poll(&pfd, 1, 200) < 0 && errno != EINTR) {
				r->sink_failed = 1;
				return;
			}
			continue;
		}
		/* EPIPE: the engine closed its end (it failed or is done). */
		r->sink_failed = 1;
		return;
	}
}

/* Feed body bytes, honouring the data-start rule first. */
static void
stream_body(struct request *r, const char *p, size_t n)
{
	size_t drop = sql_skip_data_prefix(&r->skip, p, n);

	fifo_write(r, p + drop, n - drop);
}

static void
join_stream(struct request *r)
{
	if (r->thread_started && !r->thread_joined) {
		pthread_join(r->thread, NULL);
		r->thread_joined = 1;
	}
}

/* The body is complete: end the data (EOF) and wait for the statement. */
static void
finish_stream(struct request *r)
{
	/* Even with no data the reader needs a writer to see EOF. */
	if (fifo_open_writer(r) == 0) {
		close(r->fifo_fd);
		r->fifo_fd = -1;
	}
	join_stream(r);
}

/*
 * The client went away before the body was complete.  A real server would
 * fail the INSERT (the body ended early), so the statement must not commit
 * the rows received so far: cancel it while it still waits for data, and
 * only then let it see EOF.
 */
static void
abort_stream(struct request *r)
{
	if (!r->thread_started || r->thread_joined)
		return;
	if (fifo_open_writer(r) == 0) {
		const char *base = strrchr(r->fifo_path, '/');
		size_t half;
		struct engine_conn *ec;

		base = base ? base + 1 : r->fifo_path;
		half = strlen(base) / 2;
		ec = engine_connect();
		if (ec != NULL) {
			char *err = NULL;
			int code = 0;
			/*
			 * Match the statement by its FIFO name, split in two so
			 * that this KILL statement does not match itself.
			 */
			char *kill = xasprintf("KILL QUERY WHERE query LIKE "
			    "concat('%%', '%.*s', '%s', '%%') ASYNC",
			    (int) half, base, base + half);

			if (engine_exec(ec, kill, &err, &code) != 0)
				free(err);
			free(kill);
			engine_close(ec);
		}
		/* Give the cancellation a moment to land before EOF. */
		sleep_ms(50);
		close(r->fifo_fd);
		r->fifo_fd = -1;
	}
	join_stream(r);
}

static const char *
compression_for(const char *encoding)
{
	static const char *const known[] = {
		"gzip", "deflate", "br", "xz", "zstd", "lz4", "bz2", "snappy",
		NULL
	};
	int i;

	if (encoding == NULL || encoding[0] == '\0' ||
	    strcasecmp(encoding, "identity") == 0)
		return NULL;
	for (i = 0; known[i]; i++)
		if (strcasecmp(encoding, known[i]) == 0)
			return known[i];
	if (strcasecmp(encoding, "x-gzip") == 0)
		return "gzip";
	return "";
}

/*
 * Start a streamed INSERT: 'text' holds the query head (from ?query= or
 * the start of the body); its first 'len' bytes are known.  Bytes after
 * the data start are written to the FIFO.
 */
static void
start_stream(struct request *r, const char *text, size_t len)
{
	const struct insert_split *sp = &r->split;
	const char *comp = compression_for(r->content_encoding);
	struct buf q = {0};
	char name[64];
	int err;

	if (r->has_query_param)	/* without the line break added above */
		set_log_text(r, r->qparam.data, r->qparam.len - 1);
	else
		set_log_text(r, text, sp->values ? sp->data_at : sp->head_end);
	check_fault(r);
	r->mode = BODY_STREAM;
	if (r->failed) {
		r->mode = BODY_DISCARD;
		return;
	}
	if (comp != NULL && comp[0] == '\0') {
		set_error_fmt(r, 48, "Unknown Content-Encoding '%s'",
		    r->content_encoding);
		r->mode = BODY_DISCARD;
		return;
	}

	snprintf(name, sizeof(name), "insert-%lu.fifo",
	    atomic_fetch_add(&g.fifo_seq, 1) + 1);
	r->fifo_path = xasprintf("%s/%s", g.fifo_dir, name);
	if (mkfifo(r->fifo_path, 0600) != 0) {
		set_error_fmt(r, 1001, "cannot create a FIFO: %s",
		    strerror(errno));
		r->mode = BODY_DISCARD;
		return;
	}

	/* INSERT INTO t [(cols)] FROM INFILE 'f' [COMPRESSION c] [SETTINGS ...] FORMAT f */
	buf_append(&q, text, sp->infile_at);
	buf_puts(&q, " FROM INFILE ");
	buf_put_literal(&q, r->fifo_path, strlen(r->fifo_path));
	if (comp != NULL) {
		buf_puts(&q, " COMPRESSION ");
		buf_put_literal(&q, comp, strlen(comp));
	}
	buf_puts(&q, " ");
	buf_append(&q, text + sp->infile_at, sp->head_end - sp->infile_at);
	if (sp->values)
		buf_puts(&q, " FORMAT Values");
	r->exec_query = q.data;
	r->skip = sp->skip;

	{
		pthread_attr_t attr;

		if (pthread_attr_init(&attr) != 0)
			die_oom();
		pthread_attr_setstacksize(&attr, THREAD_STACK);
		err = pthread_create(&r->thread, &attr, stream_thread, r);
		pthread_attr_destroy(&attr);
	}
	if (err != 0) {
		set_error_fmt(r, 439, "cannot start a thread: %s",
		    strerror(err));
		r->mode = BODY_DISCARD;
		return;
	}
	r->thread_started = 1;
	/* Data already in hand after the head. */
	fifo_write(r, text + sp->data_at, len - sp->data_at);
}

/* ---- responses ---- */

static void
add_common_headers(struct MHD_Response *resp, struct request *r)
{
	if (r->query_id != NULL)
		MHD_add_response_header(resp, "X-ClickHouse-Query-Id",
		    r->query_id);
	MHD_add_response_header(resp, "X-ClickHouse-Server-Display-Name",
	    g.hostname);
	MHD_add_response_header(resp, "Keep-Alive", "timeout=30");
}

static enum MHD_Result
queue_text(struct MHD_Connection *c, struct request *r, unsigned int status,
	   const char *text, const char *content_type)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_buffer(strlen(text), (void *) text,
	    MHD_RESPMEM_MUST_COPY);
	if (resp == NULL)
		return MHD_NO;
	if (r != NULL)
		add_common_headers(resp, r);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
	    content_type);
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result
queue_error(struct MHD_Connection *c, struct request *r)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;
	char code[16], status_str[16];
	unsigned int status = (unsigned int) http_status_for(r->err_code);
	char *body;

	if (r->err_code == 194)
		status = 401;	/* REQUIRED_PASSWORD asks for credentials */
	if (r->err_msg == NULL)
		r->err_msg = xasprintf("Code: %d. DB::Exception: (no message)",
		    r->err_code);
	body = xasprintf("%s%s", r->err_msg,
	    (r->err_msg[0] && r->err_msg[strlen(r->err_msg) - 1] == '\n') ?
	    "" : "\n");
	resp = MHD_create_response_from_buffer(strlen(body), body,
	    MHD_RESPMEM_MUST_FREE);
	if (resp == NULL) {
		free(body);
		return MHD_NO;
	}
	snprintf(code, sizeof(code), "%d", r->err_code);
	add_common_headers(resp, r);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
	    "text/plain; charset=UTF-8");
	MHD_add_response_header(resp, "X-ClickHouse-Exception-Code", code);
	if (status == 401)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
		    "Basic realm=\"ClickHouse server HTTP API\"");
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	snprintf(status_str, sizeof(status_str), "%u", status);
	log_request(r, status_str);
	r->answered = 1;
	return ret;
}

static void
free_result_cb(void *cls)
{
	struct engine_result *res = cls;

	engine_result_free(res);
	free(res);
}

static enum MHD_Result
queue_result(struct MHD_Connection *c, struct request *r)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;
	char summary[512];
	const struct engine_result *res = &r->res;
	uint64_t result_rows = 0;

	if (res->len > 0) {
		struct engine_result *owned = xmalloc(sizeof(*owned));

		/* The response owns the engine's buffer: no copy. */
		*owned = r->res;
		memset(&r->res, 0, sizeof(r->res));
		res = owned;
		resp = MHD_create_response_from_buffer_with_free_callback_cls(
		    owned->len, (void *) owned->data, free_result_cb, owned);
		if (resp == NULL) {
			free_result_cb(owned);
			return MHD_NO;
		}
	} else {
		resp = MHD_create_response_from_buffer(0, (void *) "",
		    MHD_RESPMEM_PERSISTENT);
		if (resp == NULL)
			return MHD_NO;
	}
	if (r->out_format != NULL)
		result_rows = res->rows_read;
	snprintf(summary, sizeof(summary),
	    "{\"read_rows\":\"%llu\",\"read_bytes\":\"%llu\","
	    "\"written_rows\":\"%llu\",\"written_bytes\":\"%llu\","
	    "\"total_rows_to_read\":\"0\",\"result_rows\":\"%llu\","
	    "\"result_bytes\":\"%zu\",\"elapsed_ns\":\"%llu\"}",
	    (unsigned long long) res->rows_read,
	    (unsigned long long) res->bytes_read,
	    (unsigned long long) res->rows_written,
	    (unsigned long long) res->bytes_written,
	    (unsigned long long) result_rows, res->len,
	    (unsigned long long) (res->elapsed * 1e9));
	add_common_headers(resp, r);
	if (r->out_format != NULL) {
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
		    content_type_for(r->out_format));
		MHD_add_response_header(resp, "X-ClickHouse-Format",
		    r->out_format);
		MHD_add_response_header(resp, "X-ClickHouse-Timezone",
		    g.timezone);
	} else {
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
		    "text/plain; charset=UTF-8");
	}
	MHD_add_response_header(resp, "X-ClickHouse-Summary", summary);
	ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	engine_result_free(&r->res);
	log_request(r, "200");
	r->answered = 1;
	return ret;
}

/*
 * Answer a finished statement.  "lost" closes the connection instead, after
 * the statement ran (whatever its outcome): the client cannot tell.
 */
static enum MHD_Result
answer(struct MHD_Connection *c, struct request *r)
{
	if (r->is_static) {
		r->answered = 1;
		return queue_text(c, r, r->static_status, r->static_body,
		    r->static_type);
	}
	if (r->fault.mode == FAULT_LOST) {
		engine_result_free(&r->res);
		log_request(r, "lost");
		r->answered = 1;
		return MHD_NO;	/* MHD closes the connection */
	}
	if (r->failed)
		return queue_error(c, r);
	return queue_result(c, r);
}

static void
request_free(struct request *r)
{
	size_t i;

	if (r == NULL)
		return;
	if (r->thread_started && !r->thread_joined)
		abort_stream(r);
	if (r->fifo_fd >= 0)
		close(r->fifo_fd);
	if (r->fifo_path != NULL) {
		unlink(r->fifo_path);
		free(r->fifo_path);
	}
	if (!r->logged && r->log_text != NULL)
		log_request(r, "aborted");
	engine_result_free(&r->res);
	for (i = 0; i < r->n_settings; i++) {
		free(r->settings[i].key);
		free(r->settings[i].value);
	}
	free(r->settings);
	free(r->query_id);
	free(r->user);
	free(r->database);
	free(r->format);
	free(r->content_encoding);
	free(r->err_msg);
	free(r->static_body);
	free(r->out_format);
	free(r->exec_query);
	free(r->log_text);
	buf_free(&r->qparam);
	buf_free(&r->body);
	free(r);
}

static void
request_completed(void *cls, struct MHD_Connection *c, void **con_cls,
		  enum MHD_RequestTerminationCode toe)
{
	(void) cls;
	(void) c;
	(void) toe;
	request_free(*con_cls);
	*con_cls = NULL;
}

/* First call for a request: headers are in, body not yet. */
static enum MHD_Result
begin_request(struct MHD_Connection *c, struct request *r, const char *url,
	      const char *method)
{
	struct arg_state st = {0};
	const char *h;
	char uuid[37];
	int is_post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;

	r->is_get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
	    strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
	st.r = r;
	MHD_get_connection_values_n(c, MHD_GET_ARGUMENT_KIND, collect_arg, &st);

	/* Headers win over URL parameters, as in the server. */
	h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
	    "X-ClickHouse-Database");
	if (h != NULL && *h) {
		free(r->database);
		r->database = xstrdup(h);
	}
	h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
	    "X-ClickHouse-Format");
	if (h != NULL && *h) {
		free(r->format);
		r->format = xstrdup(h);
	}
	h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
	    MHD_HTTP_HEADER_CONTENT_ENCODING);
	if (h != NULL)
		r->content_encoding = xstrdup(h);
	if (st.query_id != NULL && *st.query_id) {
		r->query_id = xstrdup(st.query_id);
	} else {
		h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
		    "X-ClickHouse-Query-Id");
		if (h != NULL && *h) {
			r->query_id = xstrdup(h);
		} else {
			make_uuid(uuid);
			r->query_id = xstrdup(uuid);
		}
	}

	/* Static pages, like the server's default handlers. */
	if (strcmp(url, "/ping") == 0 ||
	    strcmp(url, "/replicas_status") == 0 ||
	    (strcmp(url, "/") == 0 && r->is_get && !r->has_query_param)) {
		set_static(r, MHD_HTTP_OK, xstrdup("Ok.\n"),
		    "text/html; charset=UTF-8");
		return MHD_YES;
	}
	if (strcmp(url, "/") != 0) {
		char *msg = xasprintf("There is no handle %s\n\nUse / or "
		    "/ping for health checks.\nOr /replicas_status for more "
		    "sophisticated health checks.\n\nSend queries from your "
		    "program with POST method or GET /?query=...\n\nUse "
		    "clickhouse-client:\n\nFor interactive data analysis:\n"
		    "    clickhouse-client\n\nFor batch query processing:\n"
		    "    clickhouse-client --query='SELECT 1' > result\n"
		    "    clickhouse-client < query > result\n", url);
		set_static(r, MHD_HTTP_NOT_FOUND, msg,
		    "text/plain; charset=UTF-8");
		return MHD_YES;
	}
	if (!r->is_get && !is_post) {
		set_static(r, MHD_HTTP_METHOD_NOT_ALLOWED,
		    xstrdup("Method not allowed\n"),
		    "text/plain; charset=UTF-8");
		return MHD_YES;
	}

	if (r->has_query_param)
		set_log_text(r, r->qparam.data, r->qparam.len);
	if (atomic_load(&g.shutting_down)) {
		set_error_fmt(r, 210, "Server is shutting down");
		r->mode = BODY_DISCARD;
		return MHD_YES;
	}
	if (authenticate(c, r, &st) != 0) {
		r->mode = BODY_DISCARD;
		return MHD_YES;
	}
	if (st.compress || st.decompress) {
		set_error_fmt(r, 48, "The native compression of the HTTP "
		    "interface (compress=1, decompress=1) is not supported by "
		    "this endpoint");
		r->mode = BODY_DISCARD;
		return MHD_YES;
	}

	if (r->is_get) {
		r->mode = BODY_NONE;
		return MHD_YES;
	}
	if (!r->has_query_param) {
		r->mode = BODY_HEAD;
		return MHD_YES;
	}
	/*
	 * As the server does: the query is the ?query= text, a line break, then
	 * the body.  The line break is what the "data starts after the first
	 * newline" rule consumes, so a body whose first byte is a blank or a
	 * newline (a RowBinary Int64 ending in 0x0A or 0x20) arrives intact.
	 */
	if (r->qparam.len > 0) {
		buf_append(&r->qparam, "\n", 1);
		r->qparam_nl = 1;
	}
	if (sql_split_insert(r->qparam.data, r->qparam.len, 1, &r->split) ==
	    SPLIT_DATA) {
		start_stream(r, r->qparam.data, r->qparam.len);
	} else {
		r->mode = BODY_QUERY;
	}
	return MHD_YES;
}

/* Body bytes for a POST without ?query=: find out what they are. */
static void
feed_head(struct request *r, const char *p, size_t n, int complete)
{
	enum insert_split_result s;

	buf_append(&r->body, p, n);
	s = sql_split_insert(r->body.data, r->body.len, complete, &r->split);
	if (s == SPLIT_DATA) {
		struct buf head = r->body;

		memset(&r->body, 0, sizeof(r->body));
		start_stream(r, head.data, head.len);
		buf_free(&head);
	} else if (s == SPLIT_NONE || complete ||
	    r->body.len >= HEAD_PROBE_LIMIT) {
		r->mode = BODY_QUERY;
	}
}

static enum MHD_Result
main_handler(void *cls, struct MHD_Connection *c, const char *url,
	     const char *method, const char *version, const char *upload_data,
	     size_t *upload_data_size, void **con_cls)
{
	struct request *r = *con_cls;

	(void) cls;
	(void) version;
	if (r == NULL) {
		r = xmalloc(sizeof(*r));
		memset(r, 0, sizeof(*r));
		r->fifo_fd = -1;
		r->received_ms = now_ms();
		atomic_init(&r->done, 0);
		*con_cls = r;
		return begin_request(c, r, url, method);
	}

	if (*upload_data_size > 0) {
		size_t n = *upload_data_size;

		*upload_data_size = 0;
		switch (r->mode) {
		case BODY_HEAD:
			feed_head(r, upload_data, n, 0);
			break;
		case BODY_QUERY:
			if (r->body.len + n > QUERY_BUFFER_LIMIT) {
				set_error_fmt(r, 229, "Query is too large (%zu). "
				    "max_query_size = %zu", r->body.len + n,
				    QUERY_BUFFER_LIMIT);
				r->mode = BODY_DISCARD;
				break;
			}
			buf_append(&r->body, upload_data, n);
			break;
		case BODY_STREAM:
			stream_body(r, upload_data, n);
			break;
		case BODY_NONE:
		case BODY_DISCARD:
			break;
		}
		return MHD_YES;
	}

	/* Final call: the whole request is in. */
	if (r->answered)
		return MHD_YES;
	if (r->mode == BODY_HEAD)
		feed_head(r, "", 0, 1);
	switch (r->mode) {
	case BODY_STREAM:
		finish_stream(r);
		break;
	case BODY_NONE:
	case BODY_QUERY: {
		struct buf text = {0};

		if (!r->failed) {
			/* The server reads the query as ?query= then the body. */
			buf_append(&text, r->qparam.data, r->qparam.len);
			buf_append(&text, r->body.data, r->body.len);
			if (r->content_encoding != NULL && r->body.len > 0 &&
			    compression_for(r->content_encoding) != NULL) {
				set_log_text(r, text.data, text.len);
				set_error_fmt(r, 48, "Compressed query text "
				    "(Content-Encoding: %s) is not supported by "
				    "this endpoint", r->content_encoding);
			} else {
				run_buffered(r, text.data, text.len,
				    r->body.len == 0 && text.len > 0 &&
				    text.data[text.len - 1] == '\n' &&
				    r->qparam_nl ? text.len - 1 : text.len);
			}
		}
		buf_free(&text);
		break;
	}
	case BODY_HEAD:
	case BODY_DISCARD:
		break;
	}
	return answer(c, r);
}

/* Refuse connections on request of the control port. */
static enum MHD_Result
accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
	int refuse = 0;

	(void) cls;
	(void) addr;
	(void) addrlen;
	pthread_mutex_lock(&fault_lock);
	if (refuse_count > 0) {
		refuse_count--;
		refuse = 1;
	}
	pthread_mutex_unlock(&fault_lock);
	if (refuse) {
		qlog_append(now_ms(), "", "", "refused", "", 0);
		return MHD_NO;
	}
	return MHD_YES;
}

/* ------------------------------------------------------------------ */
/* Control port                                                        */
/* ------------------------------------------------------------------ */

static enum MHD_Result
control_reply(struct MHD_Connection *c, unsigned int status, char *text)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_buffer(strlen(text), text,
	    MHD_RESPMEM_MUST_FREE);
	if (resp == NULL) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
	    "text/plain; charset=UTF-8");
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static int
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

static enum MHD_Result
control_fault(struct MHD_Connection *c)
{
	const char *pattern = MHD_lookup_connection_value(c,
	    MHD_GET_ARGUMENT_KIND, "pattern");
	const char *mode_s = MHD_lookup_connection_value(c,
	    MHD_GET_ARGUMENT_KIND, "mode");
	const char *count_s = MHD_lookup_connection_value(c,
	    MHD_GET_ARGUMENT_KIND, "count");
	const char *code_s = MHD_lookup_connection_value(c,
	    MHD_GET_ARGUMENT_KIND, "code");
	const char *ms_s = MHD_lookup_connection_value(c,
	    MHD_GET_ARGUMENT_KIND, "ms");
	long count = 1, code = 0, ms = 0;
	enum fault_mode mode;
	struct fault *f, **pp;

	if (mode_s == NULL)
		return control_reply(c, 400, xstrdup("mode is required "
		    "(error, lost, delay, refuse)\n"));
	if (strcmp(mode_s, "error") == 0)
		mode = FAULT_ERROR;
	else if (strcmp(mode_s, "lost") == 0)
		mode = FAULT_LOST;
	else if (strcmp(mode_s, "delay") == 0)
		mode = FAULT_DELAY;
	else if (strcmp(mode_s, "refuse") == 0)
		mode = FAULT_REFUSE;
	else
		return control_reply(c, 400,
		    xasprintf("unknown mode '%s'\n", mode_s));
	if (count_s != NULL && (parse_long(count_s, &count) != 0 || count < 1))
		return control_reply(c, 400, xstrdup("bad count\n"));
	if (mode == FAULT_ERROR &&
	    (parse_long(code_s, &code) != 0 || code <= 0 || code > 100000))
		return control_reply(c, 400,
		    xstrdup("mode=error needs code=<ClickHouse error code>\n"));
	if (mode == FAULT_DELAY &&
	    (parse_long(ms_s, &ms) != 0 || ms < 0 || ms > 3600000))
		return control_reply(c, 400,
		    xstrdup("mode=delay needs ms=<milliseconds>\n"));

	pthread_mutex_lock(&fault_lock);
	if (mode == FAULT_REFUSE) {
		refuse_count += count;
	} else {
		f = xmalloc(sizeof(*f));
		f->pattern = xstrdup(pattern ? pattern : "");
		f->count = count;
		f->mode = mode;
		f->code = (int) code;
		f->ms = ms;
		f->next = NULL;
		for (pp = &faults; *pp != NULL; pp = &(*pp)->next)
			;
		*pp = f;
	}
	pthread_mutex_unlock(&fault_lock);
	return control_reply(c, 200, xstrdup("Ok.\n"));
}

static enum MHD_Result
control_log(struct MHD_Connection *c)
{
	const char *since_s = MHD_lookup_connection_value(c,
	    MHD_GET_ARGUMENT_KIND, "since");
	long since = 0;
	struct buf out = {0};
	size_t i;

	if (since_s != NULL && (parse_long(since_s, &since) != 0 || since < 0))
		return control_reply(c, 400, xstrdup("bad since\n"));
	buf_append(&out, "", 0);
	pthread_mutex_lock(&qlog_lock);
	for (i = (size_t) since > qlog_first ? (size_t) since : qlog_first;
	    i < qlog_n; i++)
		buf_puts(&out, qlog_lines[i - qlog_first]);
	pthread_mutex_unlock(&qlog_lock);
	return control_reply(c, 200, out.data);
}

static enum MHD_Result
control_handler(void *cls, struct MHD_Connection *c, const char *url,
		const char *method, const char *version,
		const char *upload_data, size_t *upload_data_size,
		void **con_cls)
{
	static int first_call_marker;
	int is_post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;

	(void) cls;
	(void) version;
	(void) upload_data;
	if (*con_cls == NULL) {
		*con_cls = &first_call_marker;
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		*upload_data_size = 0;	/* bodies carry nothing here */
		return MHD_YES;
	}
	if (strcmp(url, "/ping") == 0)
		return control_reply(c, 200, xstrdup("Ok.\n"));
	if (strcmp(url, "/fault") == 0 && is_post)
		return control_fault(c);
	if (strcmp(url, "/faults/clear") == 0 && is_post) {
		faults_clear();
		return control_reply(c, 200, xstrdup("Ok.\n"));
	}
	if (strcmp(url, "/log") == 0 && !is_post)
		return control_log(c);
	return control_reply(c, 404, xasprintf("no such control endpoint: "
	    "%s %s\n", method, url));
}

/* ------------------------------------------------------------------ */
/* Startup and shutdown                                                */
/* ------------------------------------------------------------------ */

static void
usage(FILE *out)
{
	fprintf(out,
	    "usage: chendpoint --lib PATH/libchdb.so --path DATADIR\n"
	    "                  --listen 127.0.0.1:PORT --control 127.0.0.1:PORT\n"
	    "                  --user USER --password PASSWORD [--log FILE]\n"
	    "                  [--config-file PATH/config.xml]\n"
	    "Serves the ClickHouse HTTP interface on the embedded engine.\n"
	    "Addresses must be loopback (127.0.0.0/8 or [::1]); port 0 picks "
	    "a free port.\n");
}

static int
is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *) sa;

		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 =
		    (const struct sockaddr_in6 *) sa;

		return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
	}
	return 0;
}

/* Bind a listening socket on a loopback HOST:PORT; -1 and a message. */
static int
listen_on(const char *spec, char *bound, size_t boundsz, int *is_v6)
{
	char host[256];
	const char *port, *colon;
	struct addrinfo hints, *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd, one = 1, rc;
	char addr[INET6_ADDRSTRLEN];

	if (spec[0] == '[') {
		const char *close_br = strchr(spec, ']');

		if (close_br == NULL || close_br[1] != ':')
			goto bad;
		snprintf(host, sizeof(host), "%.*s",
		    (int) (close_br - spec - 1), spec + 1);
		port = close_br + 2;
	} else {
		colon = strrchr(spec, ':');
		if (colon == NULL)
			goto bad;
		snprintf(host, sizeof(host), "%.*s", (int) (colon - spec),
		    spec);
		port = colon + 1;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0) {
		fprintf(stderr, "chendpoint: %s: %s\n", spec, gai_strerror(rc));
		return -1;
	}
	if (!is_loopback(ai->ai_addr)) {
		fprintf(stderr, "chendpoint: %s: refusing to listen on a "
		    "non-loopback address\n", spec);
		freeaddrinfo(ai);
		return -1;
	}
	*is_v6 = ai->ai_family == AF_INET6;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		fprintf(stderr, "chendpoint: socket: %s\n", strerror(errno));
		freeaddrinfo(ai);
		return -1;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
	    listen(fd, 128) != 0 ||
	    getsockname(fd, (struct sockaddr *) &ss, &sl) != 0) {
		fprintf(stderr, "chendpoint: %s: %s\n", spec, strerror(errno));
		close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *) &ss;

		inet_ntop(AF_INET6, &in6->sin6_addr, addr, sizeof(addr));
		snprintf(bound, boundsz, "[%s]:%u", addr,
		    ntohs(in6->sin6_port));
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *) &ss;

		inet_ntop(AF_INET, &in->sin_addr, addr, sizeof(addr));
		snprintf(bound, boundsz, "%s:%u", addr, ntohs(in->sin_port));
	}
	return fd;
bad:
	fprintf(stderr, "chendpoint: bad address '%s' (want HOST:PORT)\n",
	    spec);
	return -1;
}

/* libmicrohttpd's diagnostics, marked as ours on stderr. */
static void
mhd_logger(void *cls, const char *fmt, va_list ap)
{
	char line[512];

	(void) cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	fprintf(stderr, "chendpoint: http: %s\n", line);
}

static struct MHD_Daemon *
start_daemon(int fd, int is_v6, MHD_AccessHandlerCallback handler,
	     int with_policy)
{
	unsigned int flags = MHD_USE_THREAD_PER_CONNECTION |
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
	    MHD_USE_ERROR_LOG;

	if (is_v6)
		flags |= MHD_USE_IPv6;
	return MHD_start_daemon(flags, 0,
	    with_policy ? accept_policy : NULL, NULL,
	    handler, NULL,
	    MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL,	/* must be first */
	    MHD_OPTION_LISTEN_SOCKET, fd,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned int) 1000,
	    /* Idle connections close after keep_alive_timeout (30 s, as the server). */
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int) 30,
	    MHD_OPTION_THREAD_STACK_SIZE, THREAD_STACK,
	    MHD_OPTION_NOTIFY_COMPLETED,
	    with_policy ? request_completed : NULL, NULL,
	    MHD_OPTION_END);
}

/* One-value query on the anchor session, for the startup banner. */
static void
query_scalar(const char *q, char *out, size_t outsz)
{
	struct engine_result res;

	out[0] = '\0';
	if (engine_query(g.anchor, q, strlen(q), "TabSeparated", &res) == 0) {
		size_t n = res.len;

		while (n > 0 && (res.data[n - 1] == '\n'))
			n--;
		if (n >= outsz)
			n = outsz - 1;
		memcpy(out, res.data, n);
		out[n] = '\0';
	}
	engine_result_free(&res);
}

/* Remove leftover FIFOs and the directory itself. */
static void
remove_fifo_dir(void)
{
	DIR *d = opendir(g.fifo_dir);
	struct dirent *e;

	if (d != NULL) {
		while ((e = readdir(d)) != NULL)
			if (strncmp(e->d_name, "insert-", 7) == 0)
				unlinkat(dirfd(d), e->d_name, 0);
		closedir(d);
	}
	rmdir(g.fifo_dir);
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"lib", required_argument, NULL, 'l'},
		{"path", required_argument, NULL, 'p'},
		{"listen", required_argument, NULL, 'L'},
		{"control", required_argument, NULL, 'C'},
		{"user", required_argument, NULL, 'u'},
		{"password", required_argument, NULL, 'P'},
		{"log", required_argument, NULL, 'o'},
		{"config-file", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *lib = NULL, *path = NULL, *listen_spec = NULL,
	    *control_spec = NULL, *log_path = NULL, *config_file = NULL;
	char err[512], main_addr[128], control_addr[128];
	const char *tmp;
	int opt, main_fd, control_fd, v6_main, v6_control, sig;
	struct MHD_Daemon *main_d, *control_d;
	sigset_t sigs;
	MHD_socket quiesced;

	g.user = NULL;
	g.password = NULL;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'l':
			lib = optarg;
			break;
		case 'p':
			path = optarg;
			break;
		case 'L':
			listen_spec = optarg;
			break;
		case 'C':
			control_spec = optarg;
			break;
		case 'u':
			g.user = optarg;
			break;
		case 'P':
			g.password = optarg;
			break;
		case 'o':
			log_path = optarg;
			break;
		case 'c':
			config_file = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !lib || !path || !listen_spec || !control_spec ||
	    !g.user || !g.password) {
		usage(stderr);
		return 2;
	}

	/*
	 * Signals: SIGTERM/SIGINT are taken synchronously by main (sigwait)
	 * and blocked everywhere else; every thread, the engine's included,
	 * inherits this mask.  Broken pipes surface as EPIPE.
	 */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);

	main_fd = listen_on(listen_spec, main_addr, sizeof(main_addr),
	    &v6_main);
	if (main_fd < 0)
		return 2;
	control_fd = listen_on(control_spec, control_addr,
	    sizeof(control_addr), &v6_control);
	if (control_fd < 0)
		return 2;

	/*
	 * The engine boots without complaint when the configuration file is
	 * missing, with its defaults; clickhouse-server refuses to start.  Do
	 * as the server does, so that a typo does not quietly drop the
	 * configuration (users, row policies, ...).
	 */
	if (config_file != NULL) {
		struct stat st;

		if (stat(config_file, &st) != 0 || access(config_file, R_OK) != 0) {
			fprintf(stderr, "chendpoint: config file %s: %s\n",
			    config_file, strerror(errno));
			return 2;
		}
		if (!S_ISREG(st.st_mode)) {
			fprintf(stderr, "chendpoint: config file %s: not a "
			    "regular file\n", config_file);
			return 2;
		}
	}

	if (log_path != NULL) {
		g.logfile = fopen(log_path, "a");
		if (g.logfile == NULL) {
			fprintf(stderr, "chendpoint: %s: %s\n", log_path,
			    strerror(errno));
			return 2;
		}
	}
	if (gethostname(g.hostname, sizeof(g.hostname) - 1) != 0)
		snprintf(g.hostname, sizeof(g.hostname), "chendpoint");

	tmp = getenv("TMPDIR");
	snprintf(g.fifo_dir, sizeof(g.fifo_dir), "%s/chendpoint-XXXXXX",
	    tmp && *tmp ? tmp : "/tmp");
	if (mkdtemp(g.fifo_dir) == NULL) {
		fprintf(stderr, "chendpoint: mkdtemp %s: %s\n", g.fifo_dir,
		    strerror(errno));
		return 1;
	}

	if (mkdir(path, 0700) != 0 && errno != EEXIST) {
		fprintf(stderr, "chendpoint: %s: %s\n", path, strerror(errno));
		rmdir(g.fifo_dir);
		return 1;
	}
	/*
	 * The engine starts its background tasks (among them the one that
	 * finishes DROP ... SYNC) only when it finds DATADIR/metadata at
	 * start; on a brand-new directory DROP TABLE ... SYNC would hang
	 * forever.  Create it first.
	 */
	{
		char *meta = xasprintf("%s/metadata", path);

		if (mkdir(meta, 0700) != 0 && errno != EEXIST) {
			fprintf(stderr, "chendpoint: %s: %s\n", meta,
			    strerror(errno));
			free(meta);
			rmdir(g.fifo_dir);
			return 1;
		}
		free(meta);
	}
	if (engine_load(lib, err, sizeof(err)) != 0) {
		fprintf(stderr, "chendpoint: cannot load the engine: %s\n", err);
		rmdir(g.fifo_dir);
		return 1;
	}
	engine_set_path(path);
	if (config_file != NULL)
		engine_set_config_file(config_file);
	g.anchor = engine_connect();
	if (g.anchor == NULL) {
		fprintf(stderr, "chendpoint: cannot open the engine on %s%s%s\n",
		    path, config_file ? " with config file " : "",
		    config_file ? config_file : "");
		rmdir(g.fifo_dir);
		return 1;
	}
	load_error_names(g.anchor);
	query_scalar("SELECT timezone()", g.timezone, sizeof(g.timezone));
	query_scalar("SELECT version()", g.engine_version,
	    sizeof(g.engine_version));

	main_d = start_daemon(main_fd, v6_main, main_handler, 1);
	control_d = main_d ?
	    start_daemon(control_fd, v6_control, control_handler, 0) : NULL;
	if (main_d == NULL || control_d == NULL) {
		fprintf(stderr, "chendpoint: cannot start the HTTP server\n");
		if (main_d != NULL)
			MHD_stop_daemon(main_d);
		engine_close(g.anchor);
		rmdir(g.fifo_dir);
		return 1;
	}

	printf("chendpoint ready: http://%s control http://%s engine %s "
	    "pid %ld\n", main_addr, control_addr, g.engine_version,
	    (long) getpid());
	fflush(stdout);

	for (;;) {
		if (sigwait(&sigs, &sig) == 0)
			break;
	}

	/*
	 * Orderly shutdown: stop accepting, refuse new statements, cancel
	 * the running ones, wait for connection threads, then close the
	 * engine (exiting with open sessions crashes the engine).
	 */
	quiesced = MHD_quiesce_daemon(main_d);
	if (quiesced != MHD_INVALID_SOCKET)
		close(quiesced);
	atomic_store(&g.shutting_down, 1);
	if (atomic_load(&g.executing) > 0) {
		char *kerr = NULL;
		int kcode = 0;

		if (engine_exec(g.anchor, "KILL QUERY WHERE query NOT ILIKE "
		    "'KILL QUERY%' ASYNC", &kerr, &kcode) != 0)
			free(kerr);
	}
	MHD_stop_daemon(main_d);
	MHD_stop_daemon(control_d);
	engine_close(g.anchor);
	remove_fifo_dir();
	if (g.logfile != NULL)
		fclose(g.logfile);
	printf("chendpoint stopped (signal %d)\n", sig);
	fflush(stdout);
	return 0;
}
