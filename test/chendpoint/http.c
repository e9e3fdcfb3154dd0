/*
 * http.c - the main port: a request's parameters and credentials, the
 * connections it arrives on, and the answer, as clickhouse-server's HTTP
 * handler gives it (statuses, headers, errors, an exception after "200 OK"
 * for mode=midstream).
 */
#define _GNU_SOURCE

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "chendpoint.h"

void
set_error(struct request *r, int code, char *msg)
{
	free(r->err_msg);
	r->failed = 1;
	r->err_code = code;
	r->err_msg = msg;
}

void
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
void
set_log_text(struct request *r, const char *text, size_t len)
{
	free(r->log_text);
	r->log_text = xstrndup(text, len);
	r->log_len = len;
}

void
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
		if (strcmp(key, "log_comment") == 0)
			r->client_log_comment = 1;
		else if (strcmp(key, "replace_running_query") == 0)
			r->replace_running = strcmp(value, "0") != 0 &&
			    value_size > 0;
		r->settings = xrealloc(r->settings,
		    (r->n_settings + 1) * sizeof(*r->settings));
		r->settings[r->n_settings].key = xstrdup(key);
		r->settings[r->n_settings].value = xstrndup(value, value_size);
		r->n_settings++;
	}
	return MHD_YES;
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
	ok = strcmp(password, g.password) == 0 &&
	    (strcmp(user, g.user) == 0 || account_role(user) != NULL);
	r->role = account_role(user);
	free(password);
	if (!ok) {
		set_error_fmt(r, 516, "%s: Authentication failed: password is "
		    "incorrect, or there is no user with such name", user);
		return -1;
	}
	return 0;
}

/* ---- accounts ---- */

/*
 * The engine runs every session as its user `default`; a server would have
 * one user per account.  What can narrow a session is a role, so each role
 * granted to `default` (configured in the users file, --config-file) is an
 * account of the same name, with the --password password, whose statements
 * run with SET ROLE <name>: that role's privileges only.  The --user account
 * runs as the role of its name when there is one, else with every role
 * `default` has (as without roles, the built-in privileges).
 * enabledRoles() needs no privilege, unlike system.role_grants.
 */
void
load_roles(struct engine_conn *conn)
{
	static const char q[] = "SELECT arrayJoin(enabledRoles()) AS r ORDER BY r";
	struct engine_result res;
	const char *p, *end;

	if (engine_query(conn, q, strlen(q), "TabSeparated", &res) != 0) {
		engine_result_free(&res);
		return;
	}
	for (p = res.data, end = res.data + res.len; p < end;) {
		const char *nl = memchr(p, '\n', (size_t) (end - p));

		if (nl == NULL)
			nl = end;
		if (nl > p) {
			g.roles = xrealloc(g.roles,
			    (g.n_roles + 1) * sizeof(*g.roles));
			g.roles[g.n_roles++] = xstrndup(p, (size_t) (nl - p));
		}
		p = nl + 1;
	}
	engine_result_free(&res);
}

const char *
account_role(const char *user)
{
	size_t i;

	for (i = 0; i < g.n_roles; i++)
		if (strcmp(g.roles[i], user) == 0)
			return g.roles[i];
	return NULL;
}

static void
add_common_headers(struct MHD_Response *resp, struct request *r)
{
	if (r->query_id != NULL)
		MHD_add_response_header(resp, "X-ClickHouse-Query-Id",
		    r->query_id);
	MHD_add_response_header(resp, "X-ClickHouse-Server-Display-Name",
	    g.hostname);
	/* Since 25.11 the server names the tag of an exception block. */
	if (r->tag[0] != '\0')
		MHD_add_response_header(resp, "X-ClickHouse-Exception-Tag",
		    r->tag);
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
	body = error_body(r->err_msg);
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

/* X-ClickHouse-Summary, Content-Type and the format headers of a result. */
static void
add_result_headers(struct MHD_Response *resp, struct request *r,
		   const struct engine_result *res)
{
	char summary[512];
	uint64_t result_rows = r->out_format != NULL ? res->rows_read : 0;

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
}

static enum MHD_Result
queue_result(struct MHD_Connection *c, struct request *r)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;
	const struct engine_result *res = &r->res;

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
	add_result_headers(resp, r, res);
	ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	engine_result_free(&r->res);
	log_request(r, "200");
	r->answered = 1;
	return ret;
}

/* ---- a failure after "200 OK" (mode=midstream) ---- */

struct midstream {
	struct engine_result res;
	size_t part;		/* result bytes sent before the exception */
	char *block;		/* the exception block */
	size_t block_len;
};

/*
 * The exception block the server writes when it fails after the answer
 * started (WriteBufferFromHTTP1ServerResponse::cancelWithException): since
 * 25.11 framed by __exception__ lines around the tag of
 * X-ClickHouse-Exception-Tag, the message and its length; before, the
 * marker line and the message.  The server then breaks the connection.
 */
static char *
exception_block(const struct request *r, const char *msg, size_t *len)
{
	char *body = error_body(msg);
	char *block;

	if (r->fault.form == FORM_MARKER)
		block = xasprintf("__exception__\r\n%s", body);
	else
		block = xasprintf("\r\n__exception__\r\n%s\r\n%s%zu %s\r\n"
		    "__exception__\r\n", r->tag, body, strlen(body), r->tag);
	free(body);
	*len = strlen(block);
	return block;
}

/* One chunk at a time: the result's first part, then the block alone. */
static ssize_t
midstream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct midstream *m = cls;
	size_t at = (size_t) pos, n;

	if (at < m->part) {
		n = m->part - at < max ? m->part - at : max;
		memcpy(buf, m->res.data + at, n);
		return (ssize_t) n;
	}
	at -= m->part;
	if (at >= m->block_len)
		return MHD_CONTENT_READER_END_WITH_ERROR;	/* no last chunk */
	n = m->block_len - at < max ? m->block_len - at : max;
	memcpy(buf, m->block + at, n);
	return (ssize_t) n;
}

static void
midstream_free(void *cls)
{
	struct midstream *m = cls;

	engine_result_free(&m->res);
	free(m->block);
	free(m);
}

static enum MHD_Result
queue_midstream(struct MHD_Connection *c, struct request *r)
{
	struct midstream *m = xmalloc(sizeof(*m));
	struct MHD_Response *resp;
	enum MHD_Result ret;
	char *msg;

	m->res = r->res;
	memset(&r->res, 0, sizeof(r->res));
	/* Whole rows of the first half: the server fails between blocks. */
	m->part = m->res.len / 2;
	while (m->part > 0 && m->res.data[m->part - 1] != '\n')
		m->part--;
	/* Servers before 25.11, which wrote the marker form, sent no tag. */
	if (r->fault.form == FORM_MARKER)
		r->tag[0] = '\0';
	msg = xasprintf("Code: %d. DB::Exception: injected fault (pattern "
	    "'%s', mode midstream). (%s)", r->fault.code, r->fault.pattern,
	    error_name(r->fault.code));
	m->block = exception_block(r, msg, &m->block_len);
	free(msg);
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024,
	    midstream_read, m, midstream_free);
	if (resp == NULL) {
		midstream_free(m);
		return MHD_NO;
	}
	add_result_headers(resp, r, &m->res);
	ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	log_request(r, "200+exception");
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
	if (r->reply_dropped) {
		engine_result_free(&r->res);
		log_request(r, "reply-dropped");
		r->answered = 1;
		return MHD_NO;
	}
	if (r->dropped) {
		log_request(r, "idle-closed");
		r->answered = 1;
		return MHD_NO;
	}
	/*
	 * A stopping server closes the connections of requests that arrive
	 * meanwhile without an answer (it has stopped listening); the
	 * statements its stop cancelled are answered with their error.  The
	 * gentle variant (mode=hold_vanish) is dropped too.
	 */
	if (r->cut_by_shutdown) {
		engine_result_free(&r->res);
		log_request(r, "shutdown");
		r->answered = 1;
		return MHD_NO;
	}
	if (r->failed)
		return queue_error(c, r);
	if (r->fault.mode == FAULT_MIDSTREAM)
		return queue_midstream(c, r);
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
	if (r->stubborn)
		atomic_fetch_sub(&g.finishing, 1);
	atomic_fetch_sub(&g.inflight, 1);
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

/* ---- connections ---- */

static pthread_mutex_t conn_lock = PTHREAD_MUTEX_INITIALIZER;
static struct conn_state *conns;
static uint64_t conn_seq;

static struct conn_state *
conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci != NULL ? ci->socket_context : NULL;
}

void
connection_notify(void *cls, struct MHD_Connection *c, void **socket_context,
		  enum MHD_ConnectionNotificationCode toe)
{
	struct conn_state *cs, **pp;

	(void) cls;
	(void) c;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		cs = xmalloc(sizeof(*cs));
		memset(cs, 0, sizeof(*cs));
		pthread_mutex_lock(&conn_lock);
		cs->id = ++conn_seq;
		cs->next = conns;
		conns = cs;
		pthread_mutex_unlock(&conn_lock);
		*socket_context = cs;
		return;
	}
	cs = *socket_context;
	if (cs == NULL)
		return;
	pthread_mutex_lock(&conn_lock);
	for (pp = &conns; *pp != NULL; pp = &(*pp)->next)
		if (*pp == cs) {
			*pp = cs->next;
			break;
		}
	pthread_mutex_unlock(&conn_lock);
	free(cs);
	*socket_context = NULL;
}

void
connections_describe(struct buf *out)
{
	struct conn_state *cs;
	uint64_t now = mono_ms();

	pthread_mutex_lock(&conn_lock);
	for (cs = conns; cs != NULL; cs = cs->next) {
		if (cs->busy || cs->requests == 0)
			buf_printf(out, "%llu\t%s\t\t%lu\n",
			    (unsigned long long) cs->id,
			    cs->busy ? "busy" : "new", cs->requests);
		else
			buf_printf(out, "%llu\tidle\t%llu\t%lu\n",
			    (unsigned long long) cs->id,
			    (unsigned long long) (now - cs->last_done_ms),
			    cs->requests);
	}
	pthread_mutex_unlock(&conn_lock);
}

/* How long the connection had been idle before this request; -1 if new. */
static long
idle_before(struct conn_state *cs)
{
	long idle = -1;

	pthread_mutex_lock(&conn_lock);
	if (cs->requests > 0)
		idle = (long) (mono_ms() - cs->last_done_ms);
	cs->busy = 1;
	pthread_mutex_unlock(&conn_lock);
	return idle;
}

void
request_completed(void *cls, struct MHD_Connection *c, void **con_cls,
		  enum MHD_RequestTerminationCode toe)
{
	struct conn_state *cs = conn_of(c);

	(void) cls;
	(void) toe;
	request_free(*con_cls);
	*con_cls = NULL;
	if (cs != NULL) {
		pthread_mutex_lock(&conn_lock);
		cs->busy = 0;
		cs->requests++;
		cs->last_done_ms = mono_ms();
		pthread_mutex_unlock(&conn_lock);
	}
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

	make_tag(r->tag);
	if (r->has_query_param)
		set_log_text(r, r->qparam.data, r->qparam.len);
	if (atomic_load(&g.shutting_down)) {
		set_error_fmt(r, 210, "Server is shutting down");
		r->cut_by_shutdown = 1;
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

enum MHD_Result
main_handler(void *cls, struct MHD_Connection *c, const char *url,
	     const char *method, const char *version, const char *upload_data,
	     size_t *upload_data_size, void **con_cls)
{
	struct request *r = *con_cls;

	(void) cls;
	(void) version;
	if (r == NULL) {
		struct conn_state *cs = conn_of(c);

		r = xmalloc(sizeof(*r));
		memset(r, 0, sizeof(*r));
		atomic_fetch_add(&g.inflight, 1);
		r->idle_ms = cs != NULL ? idle_before(cs) : -1;
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

/*
 * Every TCP connection accepted on the main port, refused ones included:
 * a test that a client did no I/O counts sockets, not only the requests
 * that reached the query handler.
 */
static atomic_ulong accepted_count;
static atomic_ulong refused_count;

/* Refuse connections on request of the control port. */
enum MHD_Result
accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
	(void) cls;
	(void) addr;
	(void) addrlen;
	atomic_fetch_add(&accepted_count, 1);
	if (fault_take_refuse()) {
		atomic_fetch_add(&refused_count, 1);
		qlog_append(now_ms(), "", "", "refused", "", 0);
		return MHD_NO;
	}
	return MHD_YES;
}

/* GET /sockets: the connections accepted and refused since the start. */
void
sockets_describe(struct buf *out)
{
	buf_printf(out, "accepted\t%lu\nrefused\t%lu\n",
	    atomic_load(&accepted_count), atomic_load(&refused_count));
}

