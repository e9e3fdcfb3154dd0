/*-------------------------------------------------------------------------
 *
 * chhttp.c
 *	  libcurl transport to the ClickHouse HTTP interface.
 *
 *	  One ChHttp owns one curl easy handle, so consecutive requests of one
 *	  backend or worker reuse a keep-alive connection.  dpwin_chhttp_post() sends
 *	  one statement and classifies what happened into a ChHttpStatus; it
 *	  never ereports for a transport or server failure (chclient.c decides
 *	  what a status means), and nothing here ever prints the password: it
 *	  travels only as HTTP basic auth, never in the URL.
 *
 *	  libcurl calls back into this file while a request runs.  Those
 *	  callbacks must not ereport: a longjmp out of libcurl would leave the
 *	  handle in an undefined state.  So they do not palloc in the usual way
 *	  (the reply buffer grows with MCXT_ALLOC_NO_OOM), do not call
 *	  CHECK_FOR_INTERRUPTS (they only look at the pending flags), and report
 *	  trouble through fields of the ChHttp that dpwin_chhttp_post() inspects after
 *	  curl_easy_perform() returns.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include <curl/curl.h>

#include "chhttp.h"
#include "dpwin.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/*
 * Idle keep-alive connections older than this are not reused.  ClickHouse
 * closes idle HTTP connections after keep_alive_timeout (10 s by default in
 * older servers, more in newer ones); reusing one the server is closing at
 * that very moment would turn a harmless reconnect into a lost reply.
 */
#define CHHTTP_MAX_IDLE_S		5

/* How much of a 200 answer's tail is searched for an in-body exception. */
#define CHHTTP_EXCEPTION_TAIL	65536

/* Longest X-ClickHouse-Query-Id / X-ClickHouse-Exception-Tag we keep. */
#define CHHTTP_HEADER_VALUE_MAX	256

struct ChHttp
{
	CURL	   *curl;
	MemoryContext mcxt;			/* private context holding this struct */
	MemoryContextCallback cleanup;

	/* private copy of the connection settings */
	char	   *server_name;
	char	   *url;
	char	   *ca_file;
	bool		verify_peer;
	int			connect_timeout_ms;
	int			request_timeout_ms;
	char	   *server_settings;
	char	   *user;
	char	   *password;

	struct curl_slist *text_headers;	/* statement as the body */
	struct curl_slist *stream_headers;	/* streamed (chunked) body */

	/* state of the request in progress, reset by dpwin_chhttp_post() */
	char		errbuf[CURL_ERROR_SIZE];
	ChHttpReply *reply;
	MemoryContext reply_mcxt;	/* where reply->body grows */
	bool		body_too_large;
	bool		body_oom;
	bool		canceled;
	bool		reader_failed;
	bool		body_sent;		/* the read callback handed out bytes */
	bool		stale_connection;	/* a reused connection was found dead */
	ChHttpBodyReader reader;
	void	   *reader_arg;
	const char *text;			/* statement sent as the body, or NULL */
	size_t		text_len;
	size_t		text_pos;
	bool		have_exception_header;
	char		query_id[CHHTTP_HEADER_VALUE_MAX];
	char		sent_query_id[CHHTTP_HEADER_VALUE_MAX];
	char		exception_tag[CHHTTP_HEADER_VALUE_MAX];

	/*
	 * A request started by dpwin_chhttp_start() and not yet waited for.  It
	 * runs on a multi handle of this connection's own, so that the caller
	 * goes on with other work (requests on other connections among it)
	 * while the server answers.
	 */
	CURLM	   *multi;
	MemoryContext started_mcxt; /* its statement, URL and reply */
	bool		started;		/* started, not yet waited for */
	bool		started_running;	/* the easy handle is in the multi */
	bool		started_done;	/* libcurl has ended the transfer */
	CURLcode	started_rc;		/* how, when started_done */
	ChHttpStatus started_status;	/* CHHTTP_OK, or why it never ran */
	int			started_timeout_ms;
	char	   *started_sql;
	char	   *started_query_id;
	char	   *started_settings;
	char	   *started_url;
	ChHttpReply started_reply;

	/*
	 * A started request whose body the caller hands over piece by piece
	 * (dpwin_chhttp_start_fed()): the piece libcurl is taking, and whether
	 * the body has ended.  With nothing to take, the transfer pauses.
	 */
	bool		fed;
	bool		feed_ended;
	const char *feed_data;
	size_t		feed_len;
	size_t		feed_pos;
};

static bool curl_initialized = false;

static void chhttp_cleanup_callback(void *arg);
static size_t chhttp_write_cb(char *ptr, size_t size, size_t nmemb, void *userdata);
static size_t chhttp_header_cb(char *buffer, size_t size, size_t nitems, void *userdata);
static size_t chhttp_read_cb(char *buffer, size_t size, size_t nitems, void *userdata);
static size_t chhttp_fed_read(void *arg, char *buf, size_t max, bool *failed);
static void chhttp_start(ChHttp *http, const char *sql, const char *query_id,
						 const char *settings, int timeout_ms, bool fed);
static int	chhttp_xferinfo_cb(void *clientp, curl_off_t dltotal, curl_off_t dlnow,
							   curl_off_t ultotal, curl_off_t ulnow);
static bool chhttp_interrupt_pending(void);
static bool chhttp_body_exception(ChHttp *http, ChHttpReply *reply);
static int	chhttp_parse_code(const char *s);
static char *chhttp_strdup_or_null(const char *s);
static char *chhttp_scrub(char *s, const char *secret);
static ChHttpStatus chhttp_post_inner(ChHttp *http, const char *sql,
									  const char *query_id, const char *settings,
									  ChHttpBodyReader reader, void *reader_arg,
									  int timeout_ms, ChHttpReply *reply);
static ChHttpStatus chhttp_finish(ChHttp *http, ChHttpReply *reply,
								  ChHttpStatus status);
static ChHttpStatus chhttp_begin(ChHttp *http, const char *sql,
								 const char *query_id, const char *settings,
								 ChHttpBodyReader reader, void *reader_arg,
								 int timeout_ms, ChHttpReply *reply,
								 StringInfo url);
static ChHttpStatus chhttp_end(ChHttp *http, ChHttpReply *reply, CURLcode rc,
							   char *url);
static ChHttpStatus chhttp_started_end(ChHttp *http, CURLcode rc);
static bool chhttp_started_turn(ChHttp *http, TimestampTz deadline);
static TimestampTz chhttp_started_deadline(ChHttp *http);
static void chhttp_build_url(ChHttp *http, StringInfo url, const char *sql,
							 const char *query_id, const char *settings,
							 bool streamed);
static void chhttp_reset_request(ChHttp *http, const char *sql,
								 ChHttpBodyReader reader, void *reader_arg,
								 ChHttpReply *reply);
static bool chhttp_set_options(ChHttp *http, const char *url, bool streamed,
							   int timeout_ms);
static void chhttp_set_transport_error(ChHttpReply *reply, const char *msg);
static ChHttpStatus chhttp_classify_failure(ChHttp *http, ChHttpReply *reply,
											CURLcode rc, long http_code,
											long request_size);
static void chhttp_code_from_body(ChHttpReply *reply);
static void chhttp_cut_to_code_line(ChHttpReply *reply);
static ChHttpStatus chhttp_classify_answer(ChHttp *http, ChHttpReply *reply,
										   long http_code);

/*
 * Open a connection object.  No network traffic happens here: the first
 * request connects.
 */
ChHttp *
dpwin_chhttp_open(const DpwinServerConf *conf)
{
	MemoryContext mcxt;
	MemoryContext oldcxt;
	ChHttp	   *http;

	if (!curl_initialized)
	{
		CURLcode	rc = curl_global_init(CURL_GLOBAL_DEFAULT);

		if (rc != CURLE_OK)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_ERROR),
					 errmsg("could not initialize libcurl: %s",
							curl_easy_strerror(rc))));
		curl_initialized = true;
	}

	/*
	 * A private child context: deleting it (dpwin_chhttp_close) or resetting
	 * or deleting the caller's context (an ERROR) runs the callback that
	 * releases the curl handle, so the handle cannot outlive its owner.
	 */
	mcxt = AllocSetContextCreate(CurrentMemoryContext,
								 "dpwin ClickHouse connection",
								 ALLOCSET_SMALL_SIZES);
	oldcxt = MemoryContextSwitchTo(mcxt);

	http = palloc0(sizeof(ChHttp));
	http->mcxt = mcxt;
	http->server_name = pstrdup(conf->server_name != NULL ? conf->server_name : "");
	http->url = pstrdup(conf->url);
	/* tolerate a trailing slash even though the validator strips it */
	{
		size_t		len = strlen(http->url);

		while (len > 0 && http->url[len - 1] == '/')
			http->url[--len] = '\0';
	}
	http->ca_file = chhttp_strdup_or_null(conf->ca_file);
	http->verify_peer = conf->verify_peer;
	http->connect_timeout_ms = conf->connect_timeout_ms;
	http->request_timeout_ms = conf->request_timeout_ms;
	http->server_settings = chhttp_strdup_or_null(conf->settings);
	http->user = chhttp_strdup_or_null(conf->user);
	http->password = chhttp_strdup_or_null(conf->password);

	http->cleanup.func = chhttp_cleanup_callback;
	http->cleanup.arg = http;
	MemoryContextRegisterResetCallback(mcxt, &http->cleanup);

	MemoryContextSwitchTo(oldcxt);

	http->curl = curl_easy_init();
	if (http->curl == NULL)
	{
		MemoryContextDelete(mcxt);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not create a libcurl handle")));
	}

	/*----------
	 * Headers that never change.  "Expect:" turns off curl's
	 * "Expect: 100-continue" handshake, which only adds a round trip (or a
	 * one-second stall against servers that do not answer it).
	 *----------
	 */
	http->text_headers = curl_slist_append(NULL, "Content-Type: text/plain; charset=UTF-8");
	if (http->text_headers != NULL)
		http->text_headers = curl_slist_append(http->text_headers, "Expect:");
	http->stream_headers = curl_slist_append(NULL, "Content-Type: application/octet-stream");
	if (http->stream_headers != NULL)
		http->stream_headers = curl_slist_append(http->stream_headers, "Transfer-Encoding: chunked");
	if (http->stream_headers != NULL)
		http->stream_headers = curl_slist_append(http->stream_headers, "Expect:");
	if (http->text_headers == NULL || http->stream_headers == NULL)
	{
		MemoryContextDelete(mcxt);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	}

	return http;
}

/* Release the handle (and the connection) now. */
void
dpwin_chhttp_close(ChHttp *http)
{
	if (http == NULL)
		return;
	/* runs chhttp_cleanup_callback, then frees http itself */
	MemoryContextDelete(http->mcxt);
}

/*
 * Reset callback of the private context.  Also runs during abort
 * processing, so it must not fail.
 */
static void
chhttp_cleanup_callback(void *arg)
{
	ChHttp	   *http = (ChHttp *) arg;

	if (http->multi != NULL)
	{
		if (http->started_running && http->curl != NULL)
			curl_multi_remove_handle(http->multi, http->curl);
		http->started_running = false;
		curl_multi_cleanup(http->multi);
		http->multi = NULL;
	}
	if (http->curl != NULL)
	{
		curl_easy_cleanup(http->curl);
		http->curl = NULL;
	}
	if (http->text_headers != NULL)
	{
		curl_slist_free_all(http->text_headers);
		http->text_headers = NULL;
	}
	if (http->stream_headers != NULL)
	{
		curl_slist_free_all(http->stream_headers);
		http->stream_headers = NULL;
	}
	/* do not leave the password lying around in freed memory */
	if (http->password != NULL)
		explicit_bzero(http->password, strlen(http->password));
}

const char *
dpwin_chhttp_status_name(ChHttpStatus status)
{
	switch (status)
	{
		case CHHTTP_OK:
			return "ok";
		case CHHTTP_SERVER_ERROR:
			return "server error";
		case CHHTTP_CONNECT_FAILED:
			return "connection failed";
		case CHHTTP_TLS_FAILED:
			return "TLS failure";
		case CHHTTP_TIMEOUT:
			return "timeout";
		case CHHTTP_REPLY_LOST:
			return "reply lost";
		case CHHTTP_CANCELED:
			return "canceled";
		case CHHTTP_CLIENT_ERROR:
			return "client error";
	}
	return "unknown";
}

/*
 * Append "name=<value>" to buf, percent-encoding the value (RFC 3986:
 * everything but unreserved characters), after a "&" unless buf ends in
 * "?".  Done here rather than with curl_easy_escape so that no malloc'd
 * string can be orphaned by an out-of-memory ereport.
 */
static void
chhttp_append_param(StringInfo buf, const char *name, const char *value)
{
	static const char hex[] = "0123456789ABCDEF";
	const unsigned char *p;

	if (buf->data[buf->len - 1] != '?')
		appendStringInfoChar(buf, '&');
	appendStringInfo(buf, "%s=", name);
	for (p = (const unsigned char *) value; *p != '\0'; p++)
	{
		if (isascii(*p) && (isalnum(*p) || *p == '-' || *p == '.' ||
							*p == '_' || *p == '~'))
			appendStringInfoChar(buf, (char) *p);
		else
		{
			appendStringInfoChar(buf, '%');
			appendStringInfoChar(buf, hex[*p >> 4]);
			appendStringInfoChar(buf, hex[*p & 0x0F]);
		}
	}
}

/*
 * Set up and run one request.  See chhttp.h for the contract.
 */
ChHttpStatus
dpwin_chhttp_post(ChHttp *http, const char *sql, const char *query_id,
				  const char *settings, ChHttpBodyReader reader, void *reader_arg,
				  int timeout_ms, ChHttpReply *reply)
{
	ChHttpStatus status;

	if (http->started)
		elog(ERROR, "dpwin: a ClickHouse request was sent on a connection still waiting for another");
	status = chhttp_post_inner(http, sql, query_id, settings, reader,
							   reader_arg, timeout_ms, reply);

	/*
	 * A keep-alive connection the server closed (it restarted, say) can look
	 * alive when libcurl picks it, and then fail before any byte of this
	 * request left: libcurl reports that as CURLE_SEND_FAIL_REWIND because it
	 * cannot resend a body it read from our callback.  Nothing reached a
	 * server, so the request is sent once more, on the fresh handle
	 * chhttp_post_inner() made; a connection that fails again is reported.
	 */
	if (status == CHHTTP_CONNECT_FAILED && http->stale_connection)
		status = chhttp_post_inner(http, sql, query_id, settings, reader,
								   reader_arg, timeout_ms, reply);

	return chhttp_finish(http, reply, status);
}

/*
 * Start one statement (the statement is the body) and return once it is
 * on its way.  See chhttp.h for the contract.
 *
 * The transfer has no deadline of libcurl's own: the caller may leave it
 * unattended while it works (dpwin_chhttp_poll() moves it on meanwhile),
 * so the request timeout runs from when dpwin_chhttp_wait() begins to wait.
 */
void
dpwin_chhttp_start(ChHttp *http, const char *sql, const char *query_id,
				   const char *settings, int timeout_ms)
{
	chhttp_start(http, sql, query_id, settings, timeout_ms, false);
}

/*
 * Start an INSERT whose body dpwin_chhttp_feed() hands over.  See chhttp.h
 * for the contract.
 */
void
dpwin_chhttp_start_fed(ChHttp *http, const char *sql, const char *query_id,
					   const char *settings, int timeout_ms)
{
	chhttp_start(http, sql, query_id, settings, timeout_ms, true);
}

static void
chhttp_start(ChHttp *http, const char *sql, const char *query_id,
			 const char *settings, int timeout_ms, bool fed)
{
	MemoryContext oldcxt;
	StringInfoData url;

	if (http->started)
		elog(ERROR, "dpwin: a ClickHouse request was started on a connection still waiting for another");
	if (http->started_mcxt == NULL)
		http->started_mcxt = AllocSetContextCreate(http->mcxt,
												   "dpwin ClickHouse started request",
												   ALLOCSET_SMALL_SIZES);
	else
		MemoryContextReset(http->started_mcxt);
	oldcxt = MemoryContextSwitchTo(http->started_mcxt);

	http->started_sql = pstrdup(sql);
	http->started_query_id = query_id != NULL ? pstrdup(query_id) : NULL;
	http->started_settings = settings != NULL ? pstrdup(settings) : NULL;
	http->started_timeout_ms = timeout_ms > 0 ? timeout_ms :
		Max(http->request_timeout_ms, 0);
	http->started_done = false;
	http->started_running = false;
	http->started_url = NULL;
	http->started = true;

	http->started_status = chhttp_begin(http, http->started_sql,
										http->started_query_id,
										http->started_settings,
										fed ? chhttp_fed_read : NULL,
										fed ? http : NULL,
										timeout_ms, &http->started_reply, &url);
	http->fed = fed;
	http->feed_ended = false;
	http->feed_data = NULL;
	http->feed_len = http->feed_pos = 0;
	if (http->started_status == CHHTTP_OK)
	{
		http->started_url = url.data;
		curl_easy_setopt(http->curl, CURLOPT_TIMEOUT_MS, 0L);
		if (http->multi == NULL)
			http->multi = curl_multi_init();
		if (http->multi != NULL &&
			curl_multi_add_handle(http->multi, http->curl) == CURLM_OK)
		{
			http->started_running = true;
			dpwin_chhttp_poll(http);

			/*
			 * On the wire before returning: a caller that works on another
			 * connection meanwhile does not move this one on, and a request
			 * still connecting would otherwise wait for the wait.
			 */
			while (!fed && !http->started_done &&
				   http->text_pos < http->text_len &&
				   !chhttp_interrupt_pending())
			{
				(void) curl_multi_poll(http->multi, NULL, 0, 100, NULL);
				dpwin_chhttp_poll(http);
			}
		}
		else
		{
			http->started_status = chhttp_end(http, &http->started_reply,
											  CURLE_FAILED_INIT, url.data);
			http->started_url = NULL;
			http->started_done = true;
		}
	}
	else
		http->started_done = true;
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Let libcurl do what it can for the started request now, and note when
 * the transfer has ended.  Never waits, never ereports.
 */
void
dpwin_chhttp_poll(ChHttp *http)
{
	int			running;
	int			left;
	CURLMsg    *msg;

	if (!http->started || http->started_done || !http->started_running)
		return;
	(void) curl_multi_perform(http->multi, &running);
	while ((msg = curl_multi_info_read(http->multi, &left)) != NULL)
	{
		if (msg->msg == CURLMSG_DONE && msg->easy_handle == http->curl)
		{
			http->started_rc = msg->data.result;
			http->started_done = true;
		}
	}
}

/*
 * Hand the started fed request the next piece of its body, or end the body
 * (len 0), and drive the transfer until libcurl has taken the piece.  See
 * chhttp.h for the contract.
 */
bool
dpwin_chhttp_feed(ChHttp *http, const char *data, size_t len)
{
	TimestampTz deadline;

	if (!http->started || !http->fed || http->feed_ended)
		elog(ERROR, "dpwin: no ClickHouse request is waiting for its body on this connection");
	deadline = chhttp_started_deadline(http);
	http->feed_data = data;
	http->feed_len = len;
	http->feed_pos = 0;
	if (len == 0)
		http->feed_ended = true;
	if (!http->started_running)
		return false;
	(void) curl_easy_pause(http->curl, CURLPAUSE_CONT);
	while (!chhttp_started_turn(http, deadline))
	{
		if (len == 0 || http->feed_pos >= http->feed_len)
			return true;
		(void) curl_multi_poll(http->multi, NULL, 0, 100, NULL);
	}
	/* the transfer ended early: libcurl must not read the piece any more */
	http->feed_data = NULL;
	http->feed_len = http->feed_pos = 0;
	return false;
}

/*
 * The body of a fed request: what is left of the piece in hand.  Nothing
 * while the body has not ended pauses the transfer (chhttp_read_cb()).
 */
static size_t
chhttp_fed_read(void *arg, char *buf, size_t max, bool *failed)
{
	ChHttp	   *http = (ChHttp *) arg;
	size_t		n = Min(max, http->feed_len - http->feed_pos);

	if (n > 0)
		memcpy(buf, http->feed_data + http->feed_pos, n);
	http->feed_pos += n;
	return n;
}

/* When a wait for the started request gives up from now (0: never). */
static TimestampTz
chhttp_started_deadline(ChHttp *http)
{
	if (http->started_timeout_ms <= 0)
		return 0;
	return TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
									   http->started_timeout_ms);
}

/*
 * One turn of waiting for the started request: let libcurl work, then end
 * the transfer (its status in started_status) when it is over, an
 * interrupt is pending or the deadline (0: none) has passed.  Returns
 * whether it ended.
 */
static bool
chhttp_started_turn(ChHttp *http, TimestampTz deadline)
{
	dpwin_chhttp_poll(http);
	if (http->started_done)
		http->started_status = chhttp_started_end(http, http->started_rc);
	else if (chhttp_interrupt_pending())
	{
		http->canceled = true;
		http->started_status = chhttp_started_end(http, CURLE_ABORTED_BY_CALLBACK);
	}
	else if (deadline != 0 && GetCurrentTimestamp() >= deadline)
		http->started_status = chhttp_started_end(http, CURLE_OPERATION_TIMEDOUT);
	else
		return false;
	return true;
}

/*
 * Take the easy handle out of the multi (a transfer still running loses
 * its connection) and classify how the transfer ended.
 */
static ChHttpStatus
chhttp_started_end(ChHttp *http, CURLcode rc)
{
	ChHttpStatus status;

	curl_multi_remove_handle(http->multi, http->curl);
	http->started_running = false;
	status = chhttp_end(http, &http->started_reply, rc, http->started_url);
	http->started_url = NULL;
	return status;
}

/*
 * Wait for the started request and fill reply (in the caller's memory
 * context) with its outcome.  See chhttp.h for the contract.
 */
ChHttpStatus
dpwin_chhttp_wait(ChHttp *http, ChHttpReply *reply)
{
	TimestampTz deadline;
	ChHttpStatus status;
	ChHttpReply *r = &http->started_reply;

	if (!http->started)
		elog(ERROR, "dpwin: no ClickHouse request was started on this connection");
	if (http->fed && !http->feed_ended && http->started_running)
	{
		/* a body never ended is never sent as if it were whole */
		http->reader_failed = true;
		http->started_status = chhttp_started_end(http, CURLE_ABORTED_BY_CALLBACK);
	}
	deadline = chhttp_started_deadline(http);
	while (http->started_running && !chhttp_started_turn(http, deadline))
		(void) curl_multi_poll(http->multi, NULL, 0, 100, NULL);
	status = http->started_status;

	/*
	 * as dpwin_chhttp_post(): a dead keep-alive connection is replaced once,
	 * unless the body was fed, which cannot be sent again
	 */
	if (status == CHHTTP_CONNECT_FAILED && http->stale_connection && !http->fed)
		status = chhttp_post_inner(http, http->started_sql,
								   http->started_query_id,
								   http->started_settings, NULL, NULL,
								   http->started_timeout_ms, r);
	status = chhttp_finish(http, r, status);

	*reply = *r;
	initStringInfo(&reply->body);
	appendBinaryStringInfo(&reply->body, r->body.data, r->body.len);
	reply->transport_error = r->transport_error != NULL ?
		pstrdup(r->transport_error) : NULL;
	reply->query_id = r->query_id != NULL ? pstrdup(r->query_id) : NULL;
	http->started = false;
	MemoryContextReset(http->started_mcxt);
	return status;
}

/*
 * Give up on the started request, if any: its connection is closed, so
 * its answer can never be mistaken for another's.
 */
void
dpwin_chhttp_abandon(ChHttp *http)
{
	if (!http->started)
		return;
	if (http->started_running)
		(void) chhttp_started_end(http, CURLE_ABORTED_BY_CALLBACK);
	http->started = false;
	MemoryContextReset(http->started_mcxt);
}

/*
 * Complete the reply: name the server, fall back to the query_id that was
 * sent when the server did not echo one, and make sure the password cannot
 * reach a message even if a server or proxy echoes it in an error.
 */
static ChHttpStatus
chhttp_finish(ChHttp *http, ChHttpReply *reply, ChHttpStatus status)
{
	if (reply->query_id == NULL && http->sent_query_id[0] != '\0')
		reply->query_id = pstrdup(http->sent_query_id);
	reply->server_name = http->server_name;

	if (status != CHHTTP_OK && http->password != NULL && http->password[0] != '\0')
	{
		char	   *scrubbed;

		if (reply->transport_error != NULL)
			reply->transport_error = chhttp_scrub(reply->transport_error,
												  http->password);
		scrubbed = chhttp_scrub(reply->body.data, http->password);
		if (scrubbed != reply->body.data)
		{
			resetStringInfo(&reply->body);
			appendStringInfoString(&reply->body, scrubbed);
			pfree(scrubbed);
		}
	}
	return status;
}

/* s with every occurrence of secret replaced; s itself when there is none. */
static char *
chhttp_scrub(char *s, const char *secret)
{
	size_t		slen = strlen(secret);
	StringInfoData buf;
	const char *p;
	const char *hit;

	if (strstr(s, secret) == NULL)
		return s;
	initStringInfo(&buf);
	for (p = s; (hit = strstr(p, secret)) != NULL; p = hit + slen)
	{
		appendBinaryStringInfo(&buf, p, hit - p);
		appendStringInfoString(&buf, "********");
	}
	appendStringInfoString(&buf, p);
	return buf.data;
}

static ChHttpStatus
chhttp_post_inner(ChHttp *http, const char *sql, const char *query_id,
				  const char *settings, ChHttpBodyReader reader, void *reader_arg,
				  int timeout_ms, ChHttpReply *reply)
{
	StringInfoData url;
	ChHttpStatus status;

	status = chhttp_begin(http, sql, query_id, settings, reader, reader_arg,
						  timeout_ms, reply, &url);
	if (status != CHHTTP_OK)
		return status;

	/* the callbacks watch for cancellation while this runs */
	return chhttp_end(http, reply, curl_easy_perform(http->curl), url.data);
}

/*
 * Everything before the transfer of one request: the reply, the callbacks'
 * state, the URL (in *url) and the options of the easy handle.  Returns
 * CHHTTP_OK when the transfer may start, else the failure, with reply
 * complete.
 */
static ChHttpStatus
chhttp_begin(ChHttp *http, const char *sql, const char *query_id,
			 const char *settings, ChHttpBodyReader reader, void *reader_arg,
			 int timeout_ms, ChHttpReply *reply, StringInfo url)
{
	memset(reply, 0, sizeof(ChHttpReply));
	initStringInfo(&reply->body);
	http->stale_connection = false;
	strlcpy(http->sent_query_id, query_id != NULL ? query_id : "",
			sizeof(http->sent_query_id));

	if (http->curl == NULL)
	{
		reply->transport_error = pstrdup("the connection was already closed");
		return CHHTTP_CLIENT_ERROR;
	}

	/* everything that can ereport happens before the transfer starts */
	chhttp_build_url(http, url, sql, query_id, settings, reader != NULL);

	/*
	 * curl_easy_reset drops every option but keeps live connections and the
	 * DNS cache, so each request starts from a known state while still
	 * reusing the keep-alive connection.
	 */
	curl_easy_reset(http->curl);
	chhttp_reset_request(http, sql, reader, reader_arg, reply);

	if (!chhttp_set_options(http, url->data, reader != NULL, timeout_ms))
	{
		http->reply = NULL;
		pfree(url->data);
		reply->transport_error = pstrdup("could not configure the libcurl handle");
		return CHHTTP_CLIENT_ERROR;
	}
	return CHHTTP_OK;
}

/*
 * Everything after the transfer of one request, which libcurl ended with
 * rc: release what the transfer used (url among it) and classify the
 * outcome into reply.
 */
static ChHttpStatus
chhttp_end(ChHttp *http, ChHttpReply *reply, CURLcode rc, char *url)
{
	CURL	   *curl = http->curl;
	long		http_code = 0;
	long		request_size = 0;

	http->reply = NULL;
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &http_code);
	curl_easy_getinfo(curl, CURLINFO_REQUEST_SIZE, &request_size);
	/* the URL may not outlive the transfer: unset it before freeing */
	curl_easy_setopt(curl, CURLOPT_URL, "");
	curl_easy_setopt(curl, CURLOPT_POSTFIELDS, NULL);
	http->text = NULL;
	pfree(url);

	/*
	 * Some libcurl releases (8.14, Debian 13's, which PostgreSQL 17 is
	 * packaged with) fail every later transfer of a handle that could not
	 * rewind a body, without sending it, even after curl_easy_reset: the next
	 * request (settling this one's lost reply, say) gets a fresh handle and
	 * connection.
	 */
	http->stale_connection = (rc == CURLE_SEND_FAIL_REWIND);
	if (rc == CURLE_SEND_FAIL_REWIND)
	{
		curl_easy_cleanup(curl);
		http->curl = curl_easy_init();
	}

	reply->http_code = http_code;
	if (http->query_id[0] != '\0')
		reply->query_id = pstrdup(http->query_id);

	if (rc != CURLE_OK)
		return chhttp_classify_failure(http, reply, rc, http_code, request_size);
	return chhttp_classify_answer(http, reply, http_code);
}

/*
 * The request URL: base URL, then query (streamed bodies only: otherwise
 * the statement is the body), query_id, the server's settings and the
 * request's own settings, which override the server's.  May ereport.
 */
static void
chhttp_build_url(ChHttp *http, StringInfo url, const char *sql,
				 const char *query_id, const char *settings, bool streamed)
{
	initStringInfo(url);
	appendStringInfo(url, "%s/?", http->url);
	if (streamed)
		chhttp_append_param(url, "query", sql);
	if (query_id != NULL && query_id[0] != '\0')
		chhttp_append_param(url, "query_id", query_id);
	/* the server's settings first: the request's own ones override them */
	if (http->server_settings != NULL && http->server_settings[0] != '\0')
		appendStringInfo(url, "%s%s", url->data[url->len - 1] == '?' ? "" : "&",
						 http->server_settings);
	if (settings != NULL && settings[0] != '\0')
		appendStringInfo(url, "%s%s", url->data[url->len - 1] == '?' ? "" : "&",
						 settings);
}

/* Reset the state the callbacks share with dpwin_chhttp_post() for one request. */
static void
chhttp_reset_request(ChHttp *http, const char *sql, ChHttpBodyReader reader,
					 void *reader_arg, ChHttpReply *reply)
{
	http->errbuf[0] = '\0';
	http->reply = reply;
	http->reply_mcxt = CurrentMemoryContext;
	http->body_too_large = false;
	http->body_oom = false;
	http->canceled = false;
	http->reader_failed = false;
	http->body_sent = false;
	http->reader = reader;
	http->reader_arg = reader_arg;
	http->text = reader != NULL ? NULL : sql;
	http->text_len = reader != NULL ? 0 : strlen(sql);
	http->text_pos = 0;
	http->fed = false;
	http->have_exception_header = false;
	http->query_id[0] = '\0';
	http->exception_tag[0] = '\0';
}

/*
 * Set every option of the (just reset) easy handle for one request: URL,
 * protocols, timeouts, credentials, TLS, body and callbacks.  Returns false
 * if libcurl refused any of them.
 */
static bool
chhttp_set_options(ChHttp *http, const char *url, bool streamed, int timeout_ms)
{
	CURL	   *curl = http->curl;
	bool		setopt_ok = true;

#define SETOPT(opt, val) \
	do { if (curl_easy_setopt(curl, (opt), (val)) != CURLE_OK) setopt_ok = false; } while (0)

	SETOPT(CURLOPT_ERRORBUFFER, http->errbuf);
	SETOPT(CURLOPT_URL, url);
	/* libcurl must not install signal handlers in a PostgreSQL process */
	SETOPT(CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
	SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
#else
	SETOPT(CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	/* credentials come only from the user mapping, never from the URL */
	SETOPT(CURLOPT_DISALLOW_USERNAME_IN_URL, 1L);
	SETOPT(CURLOPT_USERAGENT, "dpwin/" DPWIN_VERSION_STR);
	SETOPT(CURLOPT_MAXAGE_CONN, (long) CHHTTP_MAX_IDLE_S);
	SETOPT(CURLOPT_TCP_KEEPALIVE, 1L);
	SETOPT(CURLOPT_CONNECTTIMEOUT_MS, (long) Max(http->connect_timeout_ms, 0));
	SETOPT(CURLOPT_TIMEOUT_MS,
		   (long) (timeout_ms > 0 ? timeout_ms : Max(http->request_timeout_ms, 0)));

	if (http->user != NULL)
	{
		SETOPT(CURLOPT_HTTPAUTH, (long) CURLAUTH_BASIC);
		SETOPT(CURLOPT_USERNAME, http->user);
		SETOPT(CURLOPT_PASSWORD, http->password != NULL ? http->password : "");
	}

	SETOPT(CURLOPT_SSL_VERIFYPEER, http->verify_peer ? 1L : 0L);
	SETOPT(CURLOPT_SSL_VERIFYHOST, http->verify_peer ? 2L : 0L);
	if (http->ca_file != NULL && http->ca_file[0] != '\0')
		SETOPT(CURLOPT_CAINFO, http->ca_file);

	SETOPT(CURLOPT_POST, 1L);
	if (streamed)
	{
		SETOPT(CURLOPT_HTTPHEADER, http->stream_headers);
		SETOPT(CURLOPT_READFUNCTION, chhttp_read_cb);
		SETOPT(CURLOPT_READDATA, http);
	}
	else
	{
		/*
		 * The statement goes out through the read callback, not as
		 * CURLOPT_POSTFIELDS: when a reused keep-alive connection dies
		 * without an answer, libcurl silently sends a POSTFIELDS request
		 * again on a fresh connection, so a statement whose reply was lost
		 * would run twice (a second EXCHANGE undoes the first).  A body from
		 * a callback cannot be rewound, so libcurl reports
		 * CURLE_SEND_FAIL_REWIND instead, a lost reply the caller settles.
		 */
		SETOPT(CURLOPT_HTTPHEADER, http->text_headers);
		SETOPT(CURLOPT_READFUNCTION, chhttp_read_cb);
		SETOPT(CURLOPT_READDATA, http);
		SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) http->text_len);
	}

	SETOPT(CURLOPT_WRITEFUNCTION, chhttp_write_cb);
	SETOPT(CURLOPT_WRITEDATA, http);
	SETOPT(CURLOPT_HEADERFUNCTION, chhttp_header_cb);
	SETOPT(CURLOPT_HEADERDATA, http);
	SETOPT(CURLOPT_NOPROGRESS, 0L);
	SETOPT(CURLOPT_XFERINFOFUNCTION, chhttp_xferinfo_cb);
	SETOPT(CURLOPT_XFERINFODATA, http);
#undef SETOPT

	return setopt_ok;
}

/* Replace reply->transport_error with a message of our own. */
static void
chhttp_set_transport_error(ChHttpReply *reply, const char *msg)
{
	pfree(reply->transport_error);
	reply->transport_error = pstrdup(msg);
}

/*
 * Classify a transfer that libcurl ended with an error (rc), given what
 * had been exchanged by then: the status code (0 when no answer arrived)
 * and the size of the request sent (0 when not even the request line went
 * out).
 */
static ChHttpStatus
chhttp_classify_failure(ChHttp *http, ChHttpReply *reply, CURLcode rc,
						long http_code, long request_size)
{
	reply->transport_error = pstrdup(http->errbuf[0] != '\0' ?
									 http->errbuf : curl_easy_strerror(rc));

	/*
	 * A server that fails after it has sent "200 OK" reports the error at the
	 * end of the body and then breaks the connection: that is a server error
	 * with a message, not a lost reply.
	 */
	if (http_code >= 200 && (rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR) &&
		chhttp_body_exception(http, reply))
		return CHHTTP_SERVER_ERROR;

	switch (rc)
	{
		case CURLE_COULDNT_RESOLVE_HOST:
		case CURLE_COULDNT_RESOLVE_PROXY:
		case CURLE_COULDNT_CONNECT:

			/*
			 * After a reused connection died with the request sent, libcurl
			 * reconnects to send it again; if that connect fails, the first
			 * attempt may still have run.
			 */
			if (http->body_sent)
				return CHHTTP_REPLY_LOST;
			return CHHTTP_CONNECT_FAILED;

		case CURLE_SSL_CONNECT_ERROR:
		case CURLE_PEER_FAILED_VERIFICATION:
		case CURLE_SSL_CERTPROBLEM:
		case CURLE_SSL_CIPHER:
		case CURLE_SSL_CACERT_BADFILE:
		case CURLE_SSL_CRL_BADFILE:
		case CURLE_SSL_ISSUER_ERROR:
		case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
		case CURLE_SSL_INVALIDCERTSTATUS:
		case CURLE_SSL_CLIENTCERT:
		case CURLE_SSL_ENGINE_NOTFOUND:
		case CURLE_SSL_ENGINE_SETFAILED:
		case CURLE_SSL_ENGINE_INITFAILED:
			return CHHTTP_TLS_FAILED;

		case CURLE_OPERATION_TIMEDOUT:

			/*
			 * A timeout before any byte of the request went out (while
			 * resolving, connecting or in the TLS handshake) cannot have run
			 * anything: report it as a failed connection.
			 */
			if (request_size <= 0 && !http->body_sent)
				return CHHTTP_CONNECT_FAILED;
			return CHHTTP_TIMEOUT;

		case CURLE_ABORTED_BY_CALLBACK:
			if (http->canceled)
				return CHHTTP_CANCELED;
			if (http->reader_failed)
				chhttp_set_transport_error(reply,
										   "the request body could not be produced");
			return CHHTTP_CLIENT_ERROR;

		case CURLE_WRITE_ERROR:
			if (http->body_too_large)
				chhttp_set_transport_error(reply,
										   "the answer exceeds the maximum size of 1 GB");
			else if (http->body_oom)
				chhttp_set_transport_error(reply,
										   "out of memory while receiving the answer");
			return CHHTTP_CLIENT_ERROR;

		case CURLE_GOT_NOTHING:
		case CURLE_RECV_ERROR:
		case CURLE_SEND_ERROR:
		case CURLE_PARTIAL_FILE:
		case CURLE_SEND_FAIL_REWIND:
		case CURLE_HTTP2:
		case CURLE_HTTP2_STREAM:
		case CURLE_WEIRD_SERVER_REPLY:
		case CURLE_BAD_CONTENT_ENCODING:

			/*
			 * The connection broke.  If not even the request line went out,
			 * the server cannot have started anything.
			 */
			if (request_size <= 0 && http_code == 0 && !http->body_sent)
				return CHHTTP_CONNECT_FAILED;
			return CHHTTP_REPLY_LOST;

		case CURLE_LOGIN_DENIED:
			chhttp_set_transport_error(reply,
									   "credentials in the url option are not allowed; put them in a user mapping");
			return CHHTTP_CLIENT_ERROR;

		default:
			return CHHTTP_CLIENT_ERROR;
	}
}

/* Set reply->exception_code from a "Code: N." body if no header gave one. */
static void
chhttp_code_from_body(ChHttpReply *reply)
{
	if (reply->exception_code <= 0)
	{
		int			code = chhttp_parse_code(reply->body.data);

		if (code > 0)
			reply->exception_code = code;
	}
}

/*
 * Cut the body down to its last line that starts with "Code: " (what older
 * servers append after an exception), if there is one.
 */
static void
chhttp_cut_to_code_line(ChHttpReply *reply)
{
	char	   *data = reply->body.data;
	int			i;

	for (i = reply->body.len - 6; i >= 0; i--)
	{
		if ((i == 0 || data[i - 1] == '\n') &&
			strncmp(data + i, "Code: ", 6) == 0)
		{
			char	   *copy = pstrdup(data + i);

			resetStringInfo(&reply->body);
			appendStringInfoString(&reply->body, copy);
			pfree(copy);
			break;
		}
	}
}

/*
 * Classify a transfer that completed: by its status code, then by the
 * exception a server may report after it has already sent "200 OK".
 */
static ChHttpStatus
chhttp_classify_answer(ChHttp *http, ChHttpReply *reply, long http_code)
{
	if (http_code < 200 || http_code > 299)
	{
		chhttp_code_from_body(reply);
		return CHHTTP_SERVER_ERROR;
	}

	/*
	 * Status 200 but the query failed after the headers went out: the server
	 * says so with X-ClickHouse-Exception-Code (a header or a trailer) or
	 * with an exception block at the end of the body.
	 */
	if (http->have_exception_header)
	{
		/*
		 * Cut the body down to the message: framed, or else from the last
		 * line that starts with "Code: ".
		 */
		if (!chhttp_body_exception(http, reply))
			chhttp_cut_to_code_line(reply);
		chhttp_code_from_body(reply);
		return CHHTTP_SERVER_ERROR;
	}
	if (chhttp_body_exception(http, reply))
		return CHHTTP_SERVER_ERROR;

	return CHHTTP_OK;
}

/*
 * Look for an exception that a server appended to a 200 answer.  Two forms
 * exist: since ClickHouse 25.11 a block framed by "__exception__<tag>" and
 * "<tag>__exception__" with the tag announced in X-ClickHouse-Exception-Tag;
 * before that, a line "__exception__" followed by "Code: N. DB::Exception".
 * Only the tail is searched and the second form must start a line, so row
 * data that merely mentions an exception does not match.
 *
 * On a match, the body is cut to the exception message and
 * reply->exception_code is set; returns whether it matched.  Runs after the
 * transfer, so it may palloc.
 */
static bool
chhttp_body_exception(ChHttp *http, ChHttpReply *reply)
{
	char	   *data = reply->body.data;
	int			len = reply->body.len;
	int			start = Max(0, len - CHHTTP_EXCEPTION_TAIL);
	char	   *msg = NULL;
	int			msglen = 0;

	if (http->exception_tag[0] != '\0')
	{
		/*----------
		 * "__exception__\r\n<tag>\r\n<message><length> <tag>\r\n__exception__\r\n"
		 * (WriteBufferFromHTTP1ServerResponse::cancelWithException).
		 *----------
		 */
		const char *tag = http->exception_tag;
		size_t		tlen = strlen(tag);
		int			i;

		for (i = len - 13; i >= start && msg == NULL; i--)
		{
			char	   *p = data + i + 13;

			if (memcmp(data + i, "__exception__", 13) != 0)
				continue;
			if (p < data + len && *p == '\r')
				p++;
			if (p < data + len && *p == '\n')
				p++;
			if (data + len - p < (long) tlen || memcmp(p, tag, tlen) != 0)
				continue;
			p += tlen;
			if (p < data + len && *p == '\r')
				p++;
			if (p < data + len && *p == '\n')
				p++;
			msg = p;
			msglen = data + len - p;
		}
		if (msg != NULL)
		{
			/* drop the trailing "<length> <tag>" line */
			char	   *end = NULL;
			char	   *p;

			for (p = msg; p + tlen <= msg + msglen; p++)
				if (memcmp(p, tag, tlen) == 0)
					end = p;
			if (end != NULL)
			{
				while (end > msg && end[-1] == ' ')
					end--;
				while (end > msg && isdigit((unsigned char) end[-1]))
					end--;
				msglen = end - msg;
			}
		}
	}

	if (msg == NULL)
	{
		const char *marker = "__exception__";
		size_t		mlen = strlen(marker);
		int			i;

		for (i = len - (int) mlen; i >= start; i--)
		{
			int			m = i + (int) mlen;

			if ((i == 0 || data[i - 1] == '\n') &&
				memcmp(data + i, marker, mlen) == 0)
			{
				if (m < len && data[m] == '\r')
					m++;
				if (m < len && data[m] == '\n')
					m++;
				if (strncmp(data + m, "Code: ", 6) == 0)
				{
					msg = data + m;
					msglen = len - m;
					break;
				}
			}
		}
	}

	if (msg == NULL)
		return false;

	/* keep just the message as the body */
	{
		char	   *copy;

		while (msglen > 0 && (msg[0] == '\n' || msg[0] == '\r'))
		{
			msg++;
			msglen--;
		}
		copy = pnstrdup(msg, msglen);
		resetStringInfo(&reply->body);
		appendStringInfoString(&reply->body, copy);
		pfree(copy);
	}
	chhttp_code_from_body(reply);
	/* an exception without a code is still an exception */
	if (reply->exception_code == 0)
		reply->exception_code = -1;
	return true;
}

/* The N of a "Code: N." prefix, or 0. */
static int
chhttp_parse_code(const char *s)
{
	const char *p = s;
	long		code = 0;

	while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
		p++;
	if (strncmp(p, "Code: ", 6) != 0)
		return 0;
	p += 6;
	while (isdigit((unsigned char) *p) && code < 1000000)
		code = code * 10 + (*p++ - '0');
	return (int) code;
}

static char *
chhttp_strdup_or_null(const char *s)
{
	return s != NULL ? pstrdup(s) : NULL;
}

/*
 * Is a cancel or die pending that CHECK_FOR_INTERRUPTS would act on right
 * now?  Mirrors the conditions of ProcessInterrupts(), so that a held-off
 * cancel does not abort a request that the caller then cannot report.
 */
static bool
chhttp_interrupt_pending(void)
{
	if (InterruptHoldoffCount != 0 || CritSectionCount != 0)
		return false;
	if (ProcDiePending)
		return true;
	if (QueryCancelPending && QueryCancelHoldoffCount == 0)
		return true;
	return false;
}

/* ---- libcurl callbacks: none of these may ereport ---- */

static size_t
chhttp_write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	ChHttp	   *http = (ChHttp *) userdata;
	StringInfo	body;
	size_t		n = size * nmemb;

	if (http->reply == NULL)
		return 0;
	body = &http->reply->body;

	if ((size_t) body->len + n + 1 > (size_t) body->maxlen)
	{
		size_t		need = (size_t) body->len + n + 1;
		size_t		newlen = (size_t) body->maxlen;
		char	   *newdata;

		if (need > MaxAllocSize)
		{
			http->body_too_large = true;
			return 0;
		}
		while (newlen < need)
			newlen *= 2;
		if (newlen > MaxAllocSize)
			newlen = MaxAllocSize;
		newdata = MemoryContextAllocExtended(http->reply_mcxt, newlen,
											 MCXT_ALLOC_NO_OOM);
		if (newdata == NULL)
		{
			http->body_oom = true;
			return 0;
		}
		memcpy(newdata, body->data, body->len + 1);
		pfree(body->data);
		body->data = newdata;
		body->maxlen = (int) newlen;
	}
	memcpy(body->data + body->len, ptr, n);
	body->len += (int) n;
	body->data[body->len] = '\0';
	return n;
}

/* Copy a header value (without the CRLF) into dst, truncating. */
static void
chhttp_copy_header_value(char *dst, const char *src, size_t srclen)
{
	size_t		i = 0;

	while (srclen > 0 && (*src == ' ' || *src == '\t'))
	{
		src++;
		srclen--;
	}
	while (srclen > 0 && (src[srclen - 1] == '\r' || src[srclen - 1] == '\n' ||
						  src[srclen - 1] == ' ' || src[srclen - 1] == '\t'))
		srclen--;
	for (i = 0; i < srclen && i < CHHTTP_HEADER_VALUE_MAX - 1; i++)
		dst[i] = src[i];
	dst[i] = '\0';
}

static bool
chhttp_header_is(const char *line, size_t len, const char *name, size_t *valoff)
{
	size_t		nlen = strlen(name);

	if (len <= nlen || line[nlen] != ':' || pg_strncasecmp(line, name, nlen) != 0)
		return false;
	*valoff = nlen + 1;
	return true;
}

static size_t
chhttp_header_cb(char *buffer, size_t size, size_t nitems, void *userdata)
{
	ChHttp	   *http = (ChHttp *) userdata;
	size_t		len = size * nitems;
	size_t		off;
	char		value[CHHTTP_HEADER_VALUE_MAX];

	if (http->reply == NULL)
		return len;

	/*
	 * A new status line starts a new response (after "100 Continue" or an
	 * authentication round trip): forget what the previous one said.
	 */
	if (len >= 5 && strncmp(buffer, "HTTP/", 5) == 0)
	{
		http->have_exception_header = false;
		http->reply->exception_code = 0;
		http->exception_tag[0] = '\0';
		return len;
	}

	if (chhttp_header_is(buffer, len, "X-ClickHouse-Exception-Code", &off))
	{
		long		code = 0;
		size_t		i;

		chhttp_copy_header_value(value, buffer + off, len - off);
		for (i = 0; isdigit((unsigned char) value[i]) && code < 1000000; i++)
			code = code * 10 + (value[i] - '0');
		http->have_exception_header = true;
		/* a present but unreadable code still means an exception */
		http->reply->exception_code = code != 0 ? (int) code : -1;
	}
	else if (chhttp_header_is(buffer, len, "X-ClickHouse-Query-Id", &off))
		chhttp_copy_header_value(http->query_id, buffer + off, len - off);
	else if (chhttp_header_is(buffer, len, "X-ClickHouse-Exception-Tag", &off))
		chhttp_copy_header_value(http->exception_tag, buffer + off, len - off);

	return len;
}

static size_t
chhttp_read_cb(char *buffer, size_t size, size_t nitems, void *userdata)
{
	ChHttp	   *http = (ChHttp *) userdata;
	size_t		max = size * nitems;
	bool		failed = false;
	size_t		n;

	if (chhttp_interrupt_pending())
	{
		http->canceled = true;
		return CURL_READFUNC_ABORT;
	}
	if (http->reader == NULL)
	{
		n = Min(max, http->text_len - http->text_pos);
		if (n > 0)
			memcpy(buffer, &http->text[http->text_pos], n);
		http->text_pos += n;
		if (n > 0)
			http->body_sent = true;
		return n;
	}

	n = http->reader(http->reader_arg, buffer, max, &failed);
	if (n == 0 && http->fed && !http->feed_ended)
		return CURL_READFUNC_PAUSE;
	if (failed)
	{
		http->reader_failed = true;
		return CURL_READFUNC_ABORT;
	}
	if (n > max)
	{
		/* a reader bug; never hand libcurl more than it asked for */
		http->reader_failed = true;
		return CURL_READFUNC_ABORT;
	}
	if (n > 0)
		http->body_sent = true;
	return n;
}

static int
chhttp_xferinfo_cb(void *clientp, curl_off_t dltotal, curl_off_t dlnow,
				   curl_off_t ultotal, curl_off_t ulnow)
{
	ChHttp	   *http = (ChHttp *) clientp;

	if (chhttp_interrupt_pending())
	{
		http->canceled = true;
		return 1;
	}
	return 0;
}
