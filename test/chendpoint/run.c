/*
 * run.c - running a statement in the engine: its session (the account's
 * role, the server's defaults, GET's readonly mode, the URL settings, the
 * database), injected delays and holds, the query_id carried in the visible
 * mode (qidmap.c), and INSERTs whose data streams through a FIFO.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "chendpoint.h"

/* The statements that prepare a session, and the key it is kept under. */
struct setup {
	char	   *stmt[4];
	int			n;
	int			defaults;	/* stmt[defaults]: the server's defaults */
	char	   *carrier;	/* SET log_comment = the query_id's carrier */
	char	   *key;
	int			unkeepable;	/* a URL setting of readonly */
};

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

static void
setup_free(struct setup *su)
{
	int i;

	for (i = 0; i < su->n; i++)
		free(su->stmt[i]);
	free(su->carrier);
	free(su->key);
	memset(su, 0, sizeof(*su));
}

/* Take the statement built in sql as the set-up's next one. */
static void
setup_add(struct setup *su, struct buf *sql)
{
	su->stmt[su->n++] = sql->data;
	memset(sql, 0, sizeof(*sql));
}

/*
 * The statements that prepare an engine session for r, the way the server
 * prepares a query context: the account's role (first: readonly = 2 would
 * refuse it), the server's defaults where clickhouse-local's differ
 * (system.settings WHERE changed) with readonly for GET, the URL settings,
 * then the database.  Their text, one a line after the query_id mode, is
 * the key under which the session is kept (sessions.c).  Returns -1 with
 * r's error set for a setting name the server would not know.
 */
static int
setup_build(struct request *r, struct setup *su)
{
	struct buf sql = {0};
	struct buf key = {0};
	size_t i;

	memset(su, 0, sizeof(*su));
	if (r->role != NULL) {
		buf_puts(&sql, "SET ROLE ");
		buf_put_ident(&sql, r->role);
		setup_add(su, &sql);
	}
	buf_puts(&sql, "SET implicit_select = 0, "
	    "allow_introspection_functions = 0");
	if (r->is_get)
		buf_puts(&sql, ", readonly = 2");
	su->defaults = su->n;
	setup_add(su, &sql);
	if (r->n_settings > 0) {
		buf_puts(&sql, "SET ");
		for (i = 0; i < r->n_settings; i++) {
			const char *k = r->settings[i].key;
			const char *v = r->settings[i].value;

			if (!valid_setting_name(k)) {
				buf_free(&sql);
				setup_free(su);
				set_error_fmt(r, 115, "Unknown setting '%s'", k);
				return -1;
			}
			/* A later log_comment would be refused there. */
			if (strcasecmp(k, "readonly") == 0)
				su->unkeepable = 1;
			if (i > 0)
				buf_puts(&sql, ", ");
			buf_puts(&sql, k);
			buf_puts(&sql, " = ");
			buf_put_literal(&sql, v, strlen(v));
		}
		setup_add(su, &sql);
	}
	if (r->database != NULL && r->database[0] != '\0') {
		buf_puts(&sql, "USE ");
		buf_put_ident(&sql, r->database);
		setup_add(su, &sql);
	}
	/* In the visible mode each statement carries the client's query_id. */
	if (qid_mode_get() == QID_VISIBLE && !r->client_log_comment) {
		char *carrier = qid_carrier(r->query_id);

		buf_puts(&sql, "SET log_comment = ");
		buf_put_literal(&sql, carrier, strlen(carrier));
		su->carrier = sql.data;
		free(carrier);
	}
	buf_puts(&key, qid_mode_get() == QID_VISIBLE ? "visible" : "hidden");
	for (i = 0; i < (size_t) su->n; i++) {
		buf_puts(&key, "\n");
		buf_puts(&key, su->stmt[i]);
	}
	su->key = key.data;
	return 0;
}

/*
 * Run the set-up in a session: all of it in a new one, with the query_id's
 * carrier joined to the defaults; in a kept one only the carrier, as the
 * rest is in place already.
 */
static int
setup_run(struct engine_conn *ec, struct request *r, const struct setup *su,
	  int fresh)
{
	char *err = NULL;
	int code = 0;
	int i;

	if (!fresh) {
		if (su->carrier == NULL ||
		    engine_exec(ec, su->carrier, &err, &code) == 0)
			return 0;
		set_error(r, code, err);
		return -1;
	}
	for (i = 0; i < su->n; i++) {
		char *joined = NULL;
		int rc;

		if (i == su->defaults && su->carrier != NULL)
			joined = xasprintf("%s, %s", su->stmt[i],
			    su->carrier + strlen("SET "));
		rc = engine_exec(ec, joined ? joined : su->stmt[i], &err, &code);
		free(joined);
		if (rc != 0) {
			set_error(r, code, err);
			return -1;
		}
	}
	return 0;
}

/*
 * Whether a session may serve the next statement of the same set-up: the
 * statement succeeded, ran without an injected fault, and changed nothing
 * a server keeps only for one request (its settings, its database, its
 * role, its temporary tables, a transaction).
 */
static int
session_reusable(const struct request *r, const struct setup *su,
		 const char *query, size_t len)
{
	static const char *const session_state[] = {
		"SET", "USE", "BEGIN", "COMMIT", "ROLLBACK", NULL
	};
	char kw[32];
	int i;

	if (r->failed || su->unkeepable || r->fault.mode != FAULT_NONE ||
	    r->cut_by_shutdown || atomic_load(&g.shutting_down))
		return 0;
	sql_first_keyword(query, len, kw, sizeof(kw));
	for (i = 0; session_state[i]; i++)
		if (strcmp(kw, session_state[i]) == 0)
			return 0;
	return !contains_nocase(query, len, "TEMPORARY");
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

/*
 * The engine's access errors name its user, `default`; the server names
 * the account ("Code: 497. DB::Exception: dpwin_refresh: Not enough
 * privileges...").  Takes msg, returns the message to keep.
 */
static char *
name_user(const struct request *r, char *msg)
{
	static const char engine_user[] = "DB::Exception: default: ";
	char *at = msg != NULL ? strstr(msg, engine_user) : NULL;
	char *named;
	size_t pre;

	if (at == NULL || r->user == NULL || strcmp(r->user, "default") == 0)
		return msg;
	pre = (size_t) (at - msg) + strlen("DB::Exception: ");
	named = xasprintf("%.*s%s: %s", (int) pre, msg, r->user,
	    at + strlen(engine_user));
	free(msg);
	return named;
}

/*
 * An injected delay or hold, in the statement's own session: a SELECT that
 * sleeps and carries the statement's text, so that system.processes shows
 * it (under the client's query_id in the visible mode) and KILL QUERY
 * stops it, as on a server where the statement itself is slow.  Returns 0
 * when the statement may run: the time is up or the hold was released.
 * A KILL from a client fails the request (394) without running it, except
 * in a stubborn hold: KILL QUERY passes over it (qidmap.c), and the
 * statement runs once released, or once the endpoint begins to stop, as a
 * server's EXCHANGE already running does.  The endpoint's stop cancels
 * the other holds as a server's shutdown cancels its queries: the request
 * fails with 394 and is answered, except a hold_vanish, the gentle
 * variant, whose connection the stop closes without an answer.
 */
static int
wait_fault(struct engine_conn *ec, struct request *r)
{
	int stubborn = r->fault.mode == FAULT_STUBBORN;
	int hold = r->fault.mode == FAULT_HOLD ||
	    r->fault.mode == FAULT_HOLD_VANISH || stubborn;
	long ms = hold ? HOLD_MAX_MS : r->fault.ms;
	long rows = ms >= 10 ? ms / 10 : 1;
	uint64_t until = mono_ms() + (uint64_t) ms;
	struct buf lit = {0};
	struct hold *h;
	unsigned long token;
	char *sql, *err = NULL;
	int code = 0, rc = 0, released;

	if ((r->fault.mode != FAULT_DELAY && !hold) || ms <= 0 || r->hold_at_eof)
		return 0;
	h = hold_begin(r->log_text ? r->log_text : "", r->log_len, stubborn,
	    &token);
	running_set_phase(r, hold ? PHASE_HOLDING : PHASE_WAITING);
	buf_put_literal(&lit, r->log_text ? r->log_text : "", r->log_len);
	sql = xasprintf("SELECT sleepEachRow(%.6f), 'chendpoint-hold-%lu', %s%s "
	    "FROM system.numbers LIMIT %ld FORMAT Null SETTINGS "
	    "max_block_size = 1, function_sleep_max_microseconds_per_block = 0, "
	    "max_execution_time = 0, max_rows_to_read = 0",
	    (double) ms / 1000.0 / (double) rows, token,
	    stubborn ? "'" STUBBORN_MARK "', " : "", lit.data, rows);
	buf_free(&lit);
	for (;;) {
		if (!hold_released(h))
			rc = engine_exec(ec, sql, &err, &code);
		/* A KILL that reached the engine all the same: sleep again. */
		if (rc == 0 || !stubborn || hold_released(h) ||
		    atomic_load(&g.shutting_down) || mono_ms() >= until)
			break;
		hold_note_kill(h);
		free(err);
		err = NULL;
	}
	free(sql);
	released = hold_released(h);
	hold_end(h);
	if (rc == 0 || released) {
		free(err);
		return 0;
	}
	if (atomic_load(&g.shutting_down)) {
		free(err);
		set_error_fmt(r, 394, "Query was cancelled");
		r->cut_by_shutdown = r->fault.mode == FAULT_HOLD_VANISH;
		return -1;
	}
	set_error(r, code, err);
	return -1;
}

/*
 * The stubborn statements a KILL QUERY matches ('what' selected from each),
 * as TabSeparated lines; NULL if it is no KILL QUERY WHERE or on failure.
 */
static char *
kill_stubborn(struct engine_conn *ec, const char *query, size_t len,
	      const char *what, enum kill_kind *kind)
{
	struct engine_result res = {0};
	size_t at, n;
	char *sql, *out = NULL;

	if (!qid_kill_condition(query, len, &at, &n, kind))
		return NULL;
	sql = qid_stubborn_select(what, query + at, n);
	if (engine_query(ec, sql, strlen(sql), "TabSeparated", &res) == 0)
		out = xstrndup(res.data ? res.data : "", res.len);
	engine_result_free(&res);
	free(sql);
	return out;
}

/*
 * A KILL QUERY that matches stubborn statements: the KILL passes over them
 * (they ignore cancellation), each hold counts it, and KILL QUERY ... SYNC
 * answers only once they have ended, as the server's synchronous KILL
 * waits for every query it matched to leave the process list.
 */
static void
kill_outlived(struct engine_conn *ec, const char *query, size_t len)
{
	static const char token_of[] =
	    "extract(query, 'chendpoint-hold-([0-9]+)')";
	char *tokens, *p, *left, kw[8];
	size_t n;
	enum kill_kind kind = KILL_ASYNC;
	uint64_t until = mono_ms() + HOLD_MAX_MS;

	sql_first_keyword(query, len, kw, sizeof(kw));
	if (strcmp(kw, "KILL") != 0)
		return;

	tokens = kill_stubborn(ec, query, len, token_of, &kind);
	for (p = tokens; p != NULL && *p != '\0'; p += n + (p[n] == '\n')) {
		char line[32];
		long token;

		n = strcspn(p, "\n");
		snprintf(line, sizeof(line), "%.*s", (int) n, p);
		if (parse_long(line, &token) == 0 && token > 0)
			holds_note_kill_token((unsigned long) token);
	}
	free(tokens);
	while (kind == KILL_SYNC && mono_ms() < until) {
		left = kill_stubborn(ec, query, len, "count()", &kind);
		if (left == NULL || atoi(left) == 0) {
			free(left);
			break;
		}
		free(left);
		sleep_ms(100);
	}
}

/*
 * One TabSeparated field of a matched statement's query column as the
 * client's statement: a hold or delay shows its statement's text (its
 * sleeping SELECT carries the hold number), a released stubborn statement
 * loses the comment that marks it.
 */
static void
put_matched_query(struct buf *out, const char *f, size_t n)
{
	static const char hold_mark[] = "chendpoint-hold-";
	static const char comment[] = STUBBORN_COMMENT;
	const char *m = memmem(f, n, hold_mark, sizeof(hold_mark) - 1);
	char *text = NULL;

	if (m != NULL)
		text = hold_text_of(strtoul(m + sizeof(hold_mark) - 1, NULL, 10));
	if (text != NULL) {
		buf_put_escaped(out, text, strlen(text));
		free(text);
		return;
	}
	if (n >= sizeof(comment) - 1 &&
	    memcmp(f, comment, sizeof(comment) - 1) == 0) {
		f += sizeof(comment) - 1;
		n -= sizeof(comment) - 1;
	}
	buf_append(out, f, n);
}

/*
 * The statements a KILL QUERY WHERE matches, stubborn ones included, read
 * before it runs as the server's KILL reads system.processes first: lines
 * "query_id\tuser\tquery\n" (TabSeparated); NULL if it is no KILL QUERY
 * WHERE, it matches nothing, or on failure.
 */
static char *
kill_matches(struct engine_conn *ec, const struct request *r,
	     const char *query, size_t len, enum kill_kind *kind)
{
	struct engine_result res = {0};
	struct buf out = {0};
	size_t at, n, mapped_len = 0;
	const char *p, *end;
	char *sql, *mapped, kw[8];

	sql_first_keyword(query, len, kw, sizeof(kw));
	if (strcmp(kw, "KILL") != 0 ||
	    !qid_kill_condition(query, len, &at, &n, kind))
		return NULL;
	/* queryID() in the condition is the client's id (visible mode) */
	mapped = qid_rewrite(query + at, n, r->query_id, &mapped_len);
	sql = mapped ? qid_kill_match_select(mapped, mapped_len) :
	    qid_kill_match_select(query + at, n);
	free(mapped);
	if (engine_query(ec, sql, strlen(sql), "TabSeparated", &res) == 0 &&
	    res.data != NULL) {
		for (p = res.data, end = res.data + res.len; p < end;) {
			const char *nl = memchr(p, '\n', (size_t) (end - p));
			const char *t1, *t2;

			if (nl == NULL)
				nl = end;
			t1 = memchr(p, '\t', (size_t) (nl - p));
			t2 = t1 ? memchr(t1 + 1, '\t', (size_t) (nl - t1 - 1)) : NULL;
			if (t2 != NULL) {
				buf_append(&out, p, (size_t) (t2 + 1 - p));
				put_matched_query(&out, t2 + 1, (size_t) (nl - t2 - 1));
				buf_puts(&out, "\n");
			}
			p = nl + 1;
		}
	}
	engine_result_free(&res);
	free(sql);
	return out.data;
}

/*
 * The result of a KILL QUERY that matched statements, as the server's:
 * one row per statement matched, kill_status then query_id, user and
 * query.  The server's ASYNC KILL says 'waiting' for each (the cancel was
 * sent; a statement that ignores it goes on), its SYNC KILL 'finished'
 * once each has ended, TEST 'unknown_status'.  The engine's own result
 * cannot say that: it lists the statements it killed under the engine's
 * ids, not those the KILL passed over.
 */
static void
kill_result(struct engine_conn *ec, struct request *r, const char *matches,
	    enum kill_kind kind)
{
	static const char *const status[] = {
		[KILL_ASYNC] = "waiting", [KILL_SYNC] = "finished",
		[KILL_TEST] = "unknown_status"
	};
	struct engine_result res = {0};
	struct buf rows = {0}, lit = {0};
	const char *p;
	char *sql;
	size_t n;

	for (p = matches; *p != '\0'; p += n + (p[n] == '\n')) {
		n = strcspn(p, "\n");
		buf_printf(&rows, "%s\t%.*s\n", status[kind], (int) n, p);
	}
	buf_put_literal(&lit, rows.data, rows.len);
	sql = xasprintf("SELECT * FROM format(TabSeparated, 'kill_status String, "
	    "query_id String, user String, query String', %s)", lit.data);
	if (engine_query(ec, sql, strlen(sql), r->out_format ? r->out_format :
	    "TabSeparated", &res) == 0) {
		engine_result_free(&r->res);
		r->res = res;
	} else
		engine_result_free(&res);
	free(sql);
	buf_free(&rows);
	buf_free(&lit);
}

static void
execute(struct request *r, const char *query, size_t len)
{
	struct engine_conn *ec;
	struct setup su;
	char *mapped = NULL, *marked, *kill_seen;
	size_t mapped_len = 0;
	enum kill_kind kind = KILL_ASYNC;
	int fresh;

	/* A stopping server takes no new statement (answer() drops it). */
	if (atomic_load(&g.shutting_down)) {
		set_error_fmt(r, 210, "Server is shutting down");
		r->cut_by_shutdown = 1;
		return;
	}
	if (setup_build(r, &su) != 0)
		return;
	if (running_add(r) != 0) {
		setup_free(&su);
		set_error_fmt(r, 216, "Query with id = %s is already running",
		    r->query_id);
		return;
	}
	ec = session_take(su.key);
	fresh = ec == NULL;
	if (fresh)
		ec = engine_connect();
	if (ec == NULL) {
		running_remove(r);
		setup_free(&su);
		set_error_fmt(r, 1001, "cannot open an engine session");
		return;
	}
	atomic_fetch_add(&g.executing, 1);
	if (setup_run(ec, r, &su, fresh) == 0 && wait_fault(ec, r) == 0) {
		const char *fmt = r->format && r->format[0] ?
		    r->format : "TabSeparated";

		mapped = qid_rewrite(query, len, r->query_id, &mapped_len);
		if (mapped == NULL) {
			mapped = xstrndup(query, len);
			mapped_len = len;
		}
		/* The statement itself ignores KILL too, once released. */
		if (r->stubborn && !r->hold_at_eof) {
			marked = xasprintf("%s%.*s", STUBBORN_COMMENT,
			    (int) mapped_len, mapped);
			free(mapped);
			mapped = marked;
			mapped_len = strlen(marked);
		}
		kill_seen = kill_matches(ec, r, query, len, &kind);
		running_set_phase(r, PHASE_RUNNING);
		if (engine_query(ec, mapped, mapped_len, fmt, &r->res) != 0) {
			set_error(r, r->res.code, name_user(r, r->res.error));
			r->res.error = NULL;
			engine_result_free(&r->res);
		} else {
			kill_outlived(ec, query, len);
			if (kill_seen != NULL && kill_seen[0] != '\0')
				kill_result(ec, r, kill_seen, kind);
		}
		free(kill_seen);
	}
	/*
	 * The shutdown cancels what is running, and the engine may hand back
	 * what a cancelled SELECT had read so far (even nothing) as a result
	 * without an error: a statement with a result that was still in the
	 * engine when the endpoint began to stop is answered as a server
	 * answers a cancelled query.  One that changes tables and came back
	 * without an error had finished, and is answered so.
	 */
	if (atomic_load(&g.shutting_down) && !r->stubborn && !r->failed &&
	    r->out_format != NULL) {
		engine_result_free(&r->res);
		set_error_fmt(r, 394, "Query was cancelled");
	}
	atomic_fetch_sub(&g.executing, 1);
	/* The statement has left system.processes once the engine answered. */
	if (session_reusable(r, &su, query, len))
		session_keep(ec, su.key);
	else
		engine_close(ec);
	setup_free(&su);
	running_set_phase(r, PHASE_ANSWERING);
	running_remove(r);
	free(mapped);
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

/*
 * mode=hold_reply: the statement has run (and left system.processes); its
 * answer waits until released.  A shutdown meanwhile drops it, as a server
 * that stops after the statement committed and before it answered.
 */
static void
hold_reply(struct request *r)
{
	struct hold *h;
	unsigned long token;

	if (r->fault.mode != FAULT_HOLD_REPLY)
		return;
	h = hold_begin(r->log_text ? r->log_text : "", r->log_len, 0, &token);
	hold_wait(h);
	if (!hold_released(h))
		r->reply_dropped = 1;
	hold_end(h);
}

/*
 * A stubborn INSERT (mode=stubborn) is held once its data is in: it runs
 * in the engine, listed in system.processes, and ends (commits its rows)
 * only when released or when the endpoint stops, whether or not its client
 * is still there -- an INSERT that completes after its client timed out.
 */
static void
hold_eof(struct request *r)
{
	struct hold *h;
	unsigned long token;

	if (!r->hold_at_eof)
		return;
	h = hold_begin(r->log_text ? r->log_text : "", r->log_len, 1, &token);
	running_set_phase(r, PHASE_HOLDING);
	hold_wait(h);
	running_set_phase(r, PHASE_RUNNING);
	hold_end(h);
}

/* Consume the fault registered for this statement, if any. */
static void
check_fault(struct request *r)
{
	if (r->fault_checked)
		return;
	r->fault_checked = 1;
	fault_take(r->log_text ? r->log_text : "", r->log_len, r->idle_ms,
	    &r->fault);
	/* The server closed the idle connection as the request came in. */
	if (r->fault.mode == FAULT_IDLE_CLOSE)
		r->dropped = 1;
	/* A shutdown waits for it to be answered (chendpoint.c). */
	if (r->fault.mode == FAULT_STUBBORN) {
		r->stubborn = 1;
		atomic_fetch_add(&g.finishing, 1);
	}
	if (r->fault.mode == FAULT_ERROR)
		set_error_fmt(r, r->fault.code, "injected fault (pattern "
		    "'%s', mode error)", r->fault.pattern);
}

/*
 * Run a statement whose text is complete (not a streamed INSERT).  The log
 * shows its first log_len bytes (without a line break added after
 * ?query= when no body followed).
 */
void
run_buffered(struct request *r, const char *text, size_t len,
	     size_t log_len)
{
	set_log_text(r, text, log_len);
	check_fault(r);
	if (r->failed || r->dropped)
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
	hold_reply(r);
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
void
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
void
finish_stream(struct request *r)
{
	/* Even with no data the reader needs a writer to see EOF. */
	if (fifo_open_writer(r) == 0) {
		hold_eof(r);
		close(r->fifo_fd);
		r->fifo_fd = -1;
	}
	join_stream(r);
	hold_reply(r);
}

/*
 * The client went away before the body was complete.  A real server would
 * fail the INSERT (the body ended early), so the statement must not commit
 * the rows received so far: cancel it while it still waits for data, and
 * only then let it see EOF.
 */
void
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

const char *
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
void
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
	if (r->failed || r->dropped) {
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
	r->hold_at_eof = r->stubborn;
	if (r->stubborn)
		buf_puts(&q, STUBBORN_COMMENT);
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
