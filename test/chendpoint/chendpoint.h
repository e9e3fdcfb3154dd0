/*
 * chendpoint.h - what the parts of the endpoint share: utilities, the
 * global state, faults, the query log, the registry of running statements
 * and the request of the main port.  See docs/endpoint.md.
 */
#ifndef CHENDPOINT_H
#define CHENDPOINT_H

#include <limits.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

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
/* A hold (mode=hold) that nobody releases ends after an hour. */
#define HOLD_MAX_MS 3600000L
/* Length of X-ClickHouse-Exception-Tag, as the server's. */
#define EXCEPTION_TAG_LEN 16

/* ---- utilities (util.c) ---- */

struct buf {
	char *data;
	size_t len, cap;
};

void die_oom(void) __attribute__((noreturn));
void *xmalloc(size_t n);
void *xrealloc(void *p, size_t n);
char *xstrndup(const char *s, size_t n);
char *xstrdup(const char *s);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void buf_append(struct buf *b, const void *p, size_t n);
void buf_puts(struct buf *b, const char *s);
void buf_printf(struct buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void buf_free(struct buf *b);
void buf_put_literal(struct buf *b, const char *s, size_t n);
void buf_put_ident(struct buf *b, const char *s);
void buf_put_escaped(struct buf *b, const char *s, size_t n);
uint64_t now_ms(void);
uint64_t mono_ms(void);
void sleep_ms(long ms);
int contains_nocase(const char *hay, size_t hlen, const char *needle);
void make_uuid(char out[37]);
void make_tag(char out[EXCEPTION_TAG_LEN + 1]);
int parse_long(const char *s, long *out);

/* ---- global state (chendpoint.c) ---- */

struct endpoint_state {
	const char *user;
	const char *password;
	char hostname[256];
	char timezone[128];
	char engine_version[64];
	char fifo_dir[PATH_MAX];
	const char *data_path;	/* --path */
	FILE *logfile;
	struct engine_conn *anchor;
	char **roles;		/* engine roles granted to `default` */
	size_t n_roles;
	atomic_int shutting_down;
	atomic_int executing;	/* statements running in the engine */
	atomic_int finishing;	/* stubborn requests not yet answered */
	atomic_int inflight;	/* requests not yet answered and freed */
	atomic_ulong fifo_seq;
};

extern struct endpoint_state g;

/* ---- error codes, statuses, content types (status.c) ---- */

const char *error_name(int code);
int http_status_for(int code);
void load_error_names(struct engine_conn *conn);
const char *content_type_for(const char *fmt);
/* "msg (version V (official build))\n", as the server ends its errors. */
char *error_body(const char *msg);

/* ---- the query log (qlog.c) ---- */

void qlog_append(uint64_t ms, const char *query_id, const char *user,
		 const char *status, const char *text, size_t tlen);
/* Lines with sequence number > since, appended to out. */
void qlog_copy_since(size_t since, struct buf *out);

/* ---- faults (fault.c) ---- */

enum fault_mode {
	FAULT_NONE = 0,
	FAULT_ERROR,
	FAULT_LOST,
	FAULT_DELAY,
	FAULT_HOLD,
	FAULT_MIDSTREAM,
	FAULT_REFUSE,
	FAULT_IDLE_CLOSE,
	FAULT_STUBBORN,		/* a hold that KILL QUERY does not stop */
	FAULT_HOLD_REPLY,	/* the statement runs; its answer is held */
	FAULT_HOLD_VANISH	/* a hold that a shutdown drops unanswered */
};

/* Exception block of a failure after "200 OK" (mode=midstream). */
enum midstream_form {
	FORM_TAGGED = 0,	/* since ClickHouse 25.11: framed, tagged */
	FORM_MARKER		/* before: "__exception__" and the message */
};

struct fault_hit {
	enum fault_mode mode;
	int code;
	long ms;
	enum midstream_form form;
	char pattern[256];
};

/*
 * The first pending statement fault matching text, consumed; idle_ms is how
 * long the request's kept-alive connection had been idle, -1 on a new one.
 */
void fault_take(const char *text, size_t len, long idle_ms,
		struct fault_hit *hit);
/* Register a fault; NULL on success, else a message for the client. */
const char *fault_add(const char *mode, const char *pattern, long count,
		      long code, long ms, const char *form);
void faults_clear(void);
/* A refused connection is due (mode=refuse): consumes one. */
int fault_take_refuse(void);
/* The pending faults, one per line, for GET /faults. */
void faults_describe(struct buf *out);

/* Holds and delays run in the engine, so that they show as running. */
struct hold;
struct hold *hold_begin(const char *text, size_t len, int stubborn,
			unsigned long *token);
int hold_released(struct hold *h);
void hold_end(struct hold *h);
/* Release the holds whose text contains pattern; returns how many. */
int holds_release(const char *pattern);
/* At shutdown: release the stubborn holds, whose statements then run. */
void holds_release_stubborn(void);
/*
 * Marks the engine text of a stubborn statement (its sleeping SELECT, and
 * the statement itself as a leading comment): KILL QUERY passes over it
 * (qidmap.c), KILL QUERY ... SYNC waits for it to end (run.c), and a
 * shutdown lets it finish (chendpoint.c).
 */
#define STUBBORN_MARK "chendpoint-" "stubborn"
#define STUBBORN_COMMENT "/* " STUBBORN_MARK " */ "
/* The KILLs a stubborn hold has outlived, for GET /holds. */
void hold_note_kill(struct hold *h);
void holds_note_kill_token(unsigned long token);
/* A copy of the text of hold 'token', or NULL if it has ended. */
char *hold_text_of(unsigned long token);
void holds_describe(struct buf *out);
/* Wait, polling, until the hold is released or the endpoint stops. */
void hold_wait(struct hold *h);

/* ---- the registry of running statements and query ids (qidmap.c) ---- */

enum qid_mode {
	QID_VISIBLE = 0,	/* statements run under the client's query_id */
	QID_HIDDEN		/* under ids of the engine's own, as behind a proxy */
};

enum run_phase {
	PHASE_RECEIVING = 0,	/* request still arriving */
	PHASE_WAITING,		/* in an injected delay */
	PHASE_HOLDING,		/* in an injected hold */
	PHASE_RUNNING,		/* in the engine */
	PHASE_ANSWERING		/* done, answer being sent */
};

struct request;

enum qid_mode qid_mode_get(void);
/* Set the mode and keep it in the data directory, for the next start. */
void qid_mode_set(enum qid_mode m);
/* The mode kept in the data directory (visible if none). */
void qid_mode_load(void);
/*
 * Enter a statement into the registry; in the visible mode, refuse a
 * query_id that is already running (returns -1, the server's code 216).
 */
int running_add(struct request *r);
void running_remove(struct request *r);
void running_set_phase(struct request *r, enum run_phase p);
/* The running statements, one per line, for GET /running. */
void running_describe(struct buf *out);
/*
 * KILL QUERY WHERE <condition>: the condition's place in text, and whether
 * the KILL is SYNC, ASYNC or TEST.  Returns 0 for any other statement.
 */
enum kill_kind {
	KILL_ASYNC = 0,
	KILL_SYNC,
	KILL_TEST
};
int qid_kill_condition(const char *text, size_t len, size_t *cond_at,
		       size_t *cond_len, enum kill_kind *kind);
/*
 * SELECT query_id, user, query of every statement (stubborn or not) that a
 * KILL with this condition matches, under the query ids of the current
 * mode, the statement that asks excepted.
 */
char *qid_kill_match_select(const char *cond, size_t len);
/*
 * SELECT <what> FROM the stubborn statements (STUBBORN_MARK) that a KILL
 * with this condition matches, under the query ids of the current mode.
 */
char *qid_stubborn_select(const char *what, const char *cond, size_t len);
/* The value of log_comment that carries a client's query_id. */
char *qid_carrier(const char *query_id);
/*
 * The statement as the engine must run it: in the visible mode so that
 * system.processes, KILL QUERY and queryID() know the client's query_id,
 * and in both modes so that KILL QUERY passes over stubborn statements;
 * NULL when nothing changes.
 */
char *qid_rewrite(const char *text, size_t len, const char *query_id,
		  size_t *out_len);

/* ---- accounts (http.c) ---- */

/* The engine role an HTTP user runs as; NULL: every role of `default`. */
const char *account_role(const char *user);
void load_roles(struct engine_conn *conn);

/* ---- connections of the main port (http.c) ---- */

struct conn_state {
	uint64_t id;
	uint64_t last_done_ms;	/* monotonic; 0 before the first answer */
	unsigned long requests;
	int busy;
	struct conn_state *next;
};

void connections_describe(struct buf *out);

/* ---- requests on the main port (http.c, run.c) ---- */

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
	uint64_t started_mono;	/* when the statement entered the registry */
	int is_get;		/* GET or HEAD: readonly, like the server */
	int is_static;		/* answered with a fixed page */
	unsigned int static_status;
	char *static_body;
	const char *static_type;
	char *query_id;
	char *user;
	const char *role;	/* engine role of the account, or NULL */
	char *database;		/* NULL: the session's default */
	char *format;		/* default output format */
	char *content_encoding;
	struct kv *settings;	/* URL settings and param_* in URL order */
	size_t n_settings;
	int client_log_comment;	/* the client set log_comment itself */
	int replace_running;	/* replace_running_query=1 */
	int has_query_param;
	struct buf qparam;	/* the ?query= text */
	int qparam_nl;		/* a line break was appended to qparam */
	struct buf body;	/* body bytes kept as query text / head */
	enum body_mode mode;
	int answered;		/* a response was queued */
	int logged;
	char tag[EXCEPTION_TAG_LEN + 1];

	/* Fault chosen for this request. */
	struct fault_hit fault;
	int fault_checked;
	long idle_ms;		/* its connection was idle this long; -1: new */
	int dropped;		/* idle_close: closed unanswered, never run */
	int stubborn;		/* ignores KILL; a shutdown lets it finish */
	int hold_at_eof;	/* a stubborn INSERT: held once its data is in */

	/* The registry of running statements. */
	int registered;
	atomic_int phase;
	struct request *run_next;

	/* Outcome. */
	struct engine_result res;
	int failed;
	int cut_by_shutdown;	/* a stopping endpoint drops it unanswered */
	int reply_dropped;	/* hold_reply: it ran; the shutdown dropped it */
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

void set_error(struct request *r, int code, char *msg);
void set_error_fmt(struct request *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void set_log_text(struct request *r, const char *text, size_t len);
void log_request(struct request *r, const char *status);

/* run.c: running statements */
void run_buffered(struct request *r, const char *text, size_t len,
		  size_t log_len);
void start_stream(struct request *r, const char *text, size_t len);
void stream_body(struct request *r, const char *p, size_t n);
void finish_stream(struct request *r);
void abort_stream(struct request *r);
const char *compression_for(const char *encoding);

/* sessions.c: engine sessions kept between statements */
/* An idle session prepared with exactly this set-up, or NULL. */
struct engine_conn *session_take(const char *setup);
/* Keep a session whose statement left it as its set-up made it. */
void session_keep(struct engine_conn *ec, const char *setup);
/* At shutdown: close the idle sessions and keep no more. */
void sessions_close_all(void);
/* For GET /sessions: idle sessions, statements run in kept and new ones. */
void sessions_describe(struct buf *out);

/* http.c: the main port's handlers */
enum MHD_Result main_handler(void *cls, struct MHD_Connection *c,
			     const char *url, const char *method,
			     const char *version, const char *upload_data,
			     size_t *upload_data_size, void **con_cls);
void request_completed(void *cls, struct MHD_Connection *c, void **con_cls,
		       enum MHD_RequestTerminationCode toe);
void connection_notify(void *cls, struct MHD_Connection *c,
		       void **socket_context,
		       enum MHD_ConnectionNotificationCode toe);
enum MHD_Result accept_policy(void *cls, const struct sockaddr *addr,
			      socklen_t addrlen);
/* The main port's accepted and refused connections, for GET /sockets. */
void sockets_describe(struct buf *out);

/* control.c: the control port */
enum MHD_Result control_handler(void *cls, struct MHD_Connection *c,
				const char *url, const char *method,
				const char *version, const char *upload_data,
				size_t *upload_data_size, void **con_cls);

#endif
