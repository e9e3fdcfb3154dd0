/*-------------------------------------------------------------------------
 *
 * chclient.c
 *	  ClickHouse statements on top of the transport (chhttp.c).
 *
 *	  The transport returns a status; this file is the one place that turns
 *	  a status into an ereport (dpwin_ch_report), so every caller gets the same
 *	  SQLSTATEs, messages and error context for the same failure.  It also
 *	  pins the request settings that make dpwin's behaviour independent of
 *	  the server's defaults, quotes identifiers and literals, parses
 *	  TabSeparated answers and settles statements whose reply was lost.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "chclient.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/*
 * Sent with every request, after the server's own `settings` option so
 * that these win (ClickHouse applies URL parameters in order).  Each one is
 * there because a server default or profile could otherwise change what
 * dpwin sees; docs/transport.md explains each.  All are accepted by
 * ClickHouse 23.x through 26.x.
 */
#define CH_REQUEST_SETTINGS \
	"wait_end_of_query=1" \
	"&async_insert=0" \
	"&insert_deduplicate=0" \
	"&format_tsv_null_representation=%5CN" \
	"&output_format_tsv_crlf_end_of_line=0" \
	"&date_time_output_format=iso" \
	"&max_partitions_per_insert_block=0"

/* How long dpwin_ch_settle_query may take before it gives up. */
#define CH_SETTLE_TIMEOUT_MS	10000

/*
 * Each settling statement gets at least this long to answer, even once the
 * deadline has passed: the last look at system.processes comes after the
 * last sleep, and it must be able to say "still running" rather than time
 * out.
 */
#define CH_SETTLE_LOOKUP_MIN_MS	2000

/* Longest server message kept in errdetail, in bytes. */
#define CH_DETAIL_MAX			2000

/* Longest statement excerpt named in an error message, in bytes. */
#define CH_WHAT_MAX				60

/* Longest query_id we generate; ClickHouse has no hard limit. */
#define CH_QUERY_ID_MAX			200

static char *ch_sanitize_id_part(const char *s);
static char *ch_describe_sql(const char *sql);
static char *ch_clean_server_message(const char *body);
static bool ch_is_auth_failure(const ChHttpReply *reply);
static DpwinFailure ch_failure_verdict(ChHttpStatus status,
									   const ChHttpReply *reply);
static bool ch_parse_count(const char *s, int64 *result);
static ChHttp *ch_open_http(ChClient *client);
static ChHttpStatus ch_post(ChClient *client, const char *sql,
							const char *query_id, ChHttpBodyReader reader,
							void *reader_arg, int timeout_ms,
							ChHttpReply *reply);

/* ---- client lifetime and query ids ---- */

ChClient *
dpwin_ch_client_open(const DpwinServerConf *conf, const char *query_id_prefix)
{
	ChClient   *client = palloc0(sizeof(ChClient));

	client->conf = conf;
	client->query_id_prefix =
		ch_sanitize_id_part(query_id_prefix != NULL ? query_id_prefix : "dpwin-");
	client->seq = 0;
	client->http = dpwin_chhttp_open(conf);
	return client;
}

void
dpwin_ch_client_close(ChClient *client)
{
	if (client == NULL)
		return;
	if (client->http != NULL)
		dpwin_chhttp_close(client->http);
	client->http = NULL;
}

/*
 * ClickHouse accepts any string as a query_id, but ids made only of
 * [A-Za-z0-9_-] need no quoting anywhere (URLs, logs, KILL QUERY).
 */
static char *
ch_sanitize_id_part(const char *s)
{
	size_t		len = strlen(s);
	char	   *out;
	size_t		i;

	if (len > CH_QUERY_ID_MAX / 2)
		len = CH_QUERY_ID_MAX / 2;
	out = palloc(len + 1);
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		out[i] = (isascii(c) && (isalnum(c) || c == '_' || c == '-')) ? (char) c : '_';
	}
	out[len] = '\0';
	return out;
}

char *
dpwin_ch_next_query_id(ChClient *client, const char *label)
{
	char	   *lab = ch_sanitize_id_part(label != NULL ? label : "q");
	char	   *id;

	client->seq++;
	id = psprintf("%s%s-" UINT64_FORMAT, client->query_id_prefix, lab,
				  client->seq);
	pfree(lab);
	return id;
}

/* ---- statements ---- */

/* The client's connection, which must not have been closed. */
static ChHttp *
ch_open_http(ChClient *client)
{
	if (client->http == NULL)
		elog(ERROR, "ClickHouse client used after close");
	return client->http;
}

static ChHttpStatus
ch_post(ChClient *client, const char *sql, const char *query_id,
		ChHttpBodyReader reader, void *reader_arg, int timeout_ms,
		ChHttpReply *reply)
{
	ChHttpStatus status;

	status = dpwin_chhttp_post(ch_open_http(client), sql, query_id, CH_REQUEST_SETTINGS,
							   reader, reader_arg, timeout_ms, reply);

	/*
	 * Remembered for callers that only see the ereport of dpwin_ch_exec() and
	 * still need to know whether another attempt may succeed.
	 */
	client->last_failure = ch_failure_verdict(status, reply);
	return status;
}

/*
 * The verdict on a request, as a caller that retries the whole of its work
 * (the chunk worker) takes it.  No connection (a failed TLS handshake
 * included, which the transport does not tell apart from one cut short)
 * and a lost or late reply may pass; a server error is as
 * dpwin_ch_status_transient() judges it, except a refusal for lack of
 * rights (ERRCODE_INSUFFICIENT_PRIVILEGE in dpwin_ch_report()), which
 * another try meets again whatever HTTP status carried it; a cancellation
 * and a request that could not be sent are final.
 */
static DpwinFailure
ch_failure_verdict(ChHttpStatus status, const ChHttpReply *reply)
{
	if (status == CHHTTP_OK)
		return DPWIN_FAILURE_NONE;
	if (status == CHHTTP_TLS_FAILED)
		return DPWIN_FAILURE_TRANSIENT;
	if (status == CHHTTP_SERVER_ERROR &&
		(reply->exception_code == CH_ACCESS_DENIED ||
		 reply->exception_code == CH_READONLY))
		return DPWIN_FAILURE_FINAL;
	return dpwin_ch_status_transient(status, reply) ?
		DPWIN_FAILURE_TRANSIENT : DPWIN_FAILURE_FINAL;
}

ChHttpStatus
dpwin_ch_try(ChClient *client, const char *sql, const char *query_id,
			 ChHttpBodyReader reader, void *reader_arg, ChHttpReply *reply)
{
	return ch_post(client, sql, query_id, reader, reader_arg, 0, reply);
}

char *
dpwin_ch_exec(ChClient *client, const char *sql)
{
	return dpwin_ch_exec_id(client, sql, dpwin_ch_next_query_id(client, "q"));
}

char *
dpwin_ch_exec_id(ChClient *client, const char *sql, const char *query_id)
{
	ChHttpReply reply;
	ChHttpStatus status;

	status = dpwin_ch_try(client, sql, query_id, NULL, NULL, &reply);
	if (status != CHHTTP_OK)
		dpwin_ch_report(status, &reply,
						psprintf("running \"%s\"", ch_describe_sql(sql)));
	return reply.body.data;
}

/* Before a statement is started: what its errors will name it by. */
static void
ch_note_started(ChClient *client, const char *sql)
{
	MemoryContext cxt = GetMemoryChunkContext(client);

	ch_open_http(client);
	if (client->started_what != NULL)
		pfree(client->started_what);
	client->started_what = MemoryContextStrdup(cxt, ch_describe_sql(sql));
}

/*
 * Start one statement on the client's connection and return without its
 * answer; dpwin_ch_finish() waits for it.
 */
void
dpwin_ch_start(ChClient *client, const char *sql, const char *label)
{
	ch_note_started(client, sql);
	dpwin_chhttp_start(client->http, sql, dpwin_ch_next_query_id(client, label),
					   CH_REQUEST_SETTINGS, 0);
}

/* Start an INSERT whose body dpwin_ch_feed() hands over. */
void
dpwin_ch_start_fed(ChClient *client, const char *sql, const char *query_id)
{
	ch_note_started(client, sql);
	dpwin_chhttp_start_fed(client->http, sql, query_id, CH_REQUEST_SETTINGS, 0);
}

/* The next piece of the started INSERT's body; len 0 ends it. */
bool
dpwin_ch_feed(ChClient *client, const char *data, size_t len)
{
	return dpwin_chhttp_feed(ch_open_http(client), data, len);
}

/* Move the started statement on, if any, without waiting. */
void
dpwin_ch_poll(ChClient *client)
{
	if (client->http != NULL)
		dpwin_chhttp_poll(client->http);
}

/*
 * Wait for the statement dpwin_ch_start() started and return its answer;
 * fails as dpwin_ch_exec() does.
 */
char *
dpwin_ch_finish(ChClient *client)
{
	ChHttpReply reply;
	ChHttpStatus status;

	status = dpwin_ch_finish_status(client, &reply);
	if (status != CHHTTP_OK)
		dpwin_ch_report(status, &reply,
						psprintf("running \"%s\"", client->started_what));
	return reply.body.data;
}

/* The same, returning the status instead of raising. */
ChHttpStatus
dpwin_ch_finish_status(ChClient *client, ChHttpReply *reply)
{
	ChHttpStatus status;

	status = dpwin_chhttp_wait(ch_open_http(client), reply);
	client->last_failure = ch_failure_verdict(status, reply);
	return status;
}

/* Give up the started statement, if any, and the connection it runs on. */
void
dpwin_ch_abandon(ChClient *client)
{
	if (client->http != NULL)
		dpwin_chhttp_abandon(client->http);
}

char *
dpwin_ch_scalar(ChClient *client, const char *sql)
{
	char	   *body = dpwin_ch_exec(client, sql);
	List	   *rows = dpwin_ch_parse_tsv(body);
	List	   *row = rows != NIL ? (List *) linitial(rows) : NIL;

	if (list_length(rows) != 1 || list_length(row) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("unexpected answer from ClickHouse while running \"%s\"",
						ch_describe_sql(sql)),
				 errdetail("Expected one row with one column, got %d rows%s.",
						   list_length(rows),
						   list_length(rows) == 1 ?
						   psprintf(" with %d columns", list_length(row)) : "")));
	return (char *) linitial(row);
}

/*
 * A short, single-line excerpt of a statement for messages: the start of
 * the statement with whitespace runs collapsed, cut at a character
 * boundary.
 */
static char *
ch_describe_sql(const char *sql)
{
	StringInfoData buf;
	const char *p = sql;
	bool		space = false;
	bool		cut = false;

	initStringInfo(&buf);
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	for (; *p != '\0'; p++)
	{
		if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		{
			space = true;
			continue;
		}
		if (space)
			appendStringInfoChar(&buf, ' ');
		space = false;
		appendStringInfoChar(&buf, *p);
		if (buf.len >= CH_WHAT_MAX * 2)
			break;
	}
	if (buf.len > CH_WHAT_MAX || *p != '\0')
	{
		int			keep = pg_mbcliplen(buf.data, buf.len, Min(buf.len, CH_WHAT_MAX));

		cut = (keep < buf.len) || *p != '\0';
		buf.data[keep] = '\0';
		buf.len = keep;
	}
	if (cut)
		appendStringInfoString(&buf, "...");
	return buf.data;
}

/* ---- error mapping ---- */

static bool
ch_is_auth_failure(const ChHttpReply *reply)
{
	switch (reply->exception_code)
	{
		case 192:				/* UNKNOWN_USER */
		case 193:				/* WRONG_PASSWORD */
		case 194:				/* REQUIRED_PASSWORD */
		case 195:				/* IP_ADDRESS_NOT_ALLOWED */
		case 516:				/* AUTHENTICATION_FAILED */
			return true;
		default:
			break;
	}
	return reply->http_code == 401 || reply->http_code == 403;
}

/*
 * The server's message made fit for errdetail: without the "Code: N.
 * DB::Exception: " prefix (the code is in the message already) and the
 * " (version ...)" / stack trace tail, on one paragraph, capped in length,
 * and valid in the database encoding.
 */
static char *
ch_clean_server_message(const char *body)
{
	const char *p = body;
	const char *end;
	const char *cut;
	char	   *msg;
	int			len;

	while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
		p++;
	if (strncmp(p, "Code: ", 6) == 0)
	{
		const char *q = p + 6;

		while (isdigit((unsigned char) *q))
			q++;
		if (*q == '.' || *q == ',')
			q++;
		while (*q == ' ')
			q++;
		p = q;
	}
	if (strncmp(p, "DB::Exception: ", 15) == 0)
		p += 15;
	else if (strncmp(p, "e.displayText() = DB::Exception: ", 33) == 0)
		p += 33;

	end = p + strlen(p);
	if ((cut = strstr(p, " (version ")) != NULL && cut < end)
		end = cut;
	if ((cut = strstr(p, "\nStack trace")) != NULL && cut < end)
		end = cut;
	if ((cut = strstr(p, "\n\n")) != NULL && cut < end)
		end = cut;
	while (end > p && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' ||
					   end[-1] == '\t'))
		end--;

	len = end - p;
	if (len > CH_DETAIL_MAX)
		len = CH_DETAIL_MAX;
	msg = pnstrdup(p, len);

	/*
	 * ClickHouse answers in UTF-8; a message that is not valid in the
	 * database encoding would make the error itself fail to convert.
	 */
	if (!pg_verifymbstr(msg, len, true))
	{
		int			i;

		for (i = 0; i < len; i++)
			if ((unsigned char) msg[i] >= 0x80)
				msg[i] = '?';
	}
	else if (len == CH_DETAIL_MAX)
	{
		/* do not leave half a character at the cut */
		len = pg_mbcliplen(msg, len, len);
		msg[len] = '\0';
	}
	if (len == CH_DETAIL_MAX || (end - p) > CH_DETAIL_MAX)
		msg = psprintf("%s...", msg);
	return msg;
}

/*
 * errcontext text naming what was on the wire.  Never contains the
 * password: the transport keeps it out of every field used here.
 */
static char *
ch_reply_context(const ChHttpReply *reply)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "ClickHouse server \"%s\"",
					 reply->server_name != NULL ? reply->server_name : "?");
	if (reply->http_code != 0)
		appendStringInfo(&buf, ", HTTP status %ld", reply->http_code);
	if (reply->exception_code > 0)
		appendStringInfo(&buf, ", exception code %d", reply->exception_code);
	if (reply->query_id != NULL)
		appendStringInfo(&buf, ", query_id %s", reply->query_id);
	return buf.data;
}

void
dpwin_ch_report(ChHttpStatus status, const ChHttpReply *reply, const char *what)
{
	const char *server = reply->server_name != NULL ? reply->server_name : "?";
	const char *terr = (reply->transport_error != NULL ?
						reply->transport_error : dpwin_chhttp_status_name(status));
	char	   *context = ch_reply_context(reply);

	switch (status)
	{
		case CHHTTP_OK:
			elog(ERROR, "dpwin_ch_report called for a successful request");
			break;

		case CHHTTP_SERVER_ERROR:
			{
				char	   *detail = ch_clean_server_message(reply->body.data);
				int			code = reply->exception_code;

				if (ch_is_auth_failure(reply) &&
					code != 497 && code != 164)
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION),
							 errmsg("ClickHouse server \"%s\" rejected the credentials while %s",
									server, what),
							 detail[0] ? errdetail("%s", detail) : 0,
							 errhint("Check the user and password options of the user mapping for server \"%s\".",
									 server),
							 errcontext("%s", context)));

				/* ACCESS_DENIED and READONLY: authenticated, not allowed */
				if (code == CH_ACCESS_DENIED || code == CH_READONLY)
					ereport(ERROR,
							(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
							 errmsg("ClickHouse error %d while %s", code, what),
							 detail[0] ? errdetail("%s", detail) : 0,
							 errcontext("%s", context)));

				if (code > 0)
					ereport(ERROR,
							(errcode(ERRCODE_FDW_ERROR),
							 errmsg("ClickHouse error %d while %s", code, what),
							 detail[0] ? errdetail("%s", detail) : 0,
							 errcontext("%s", context)));
				ereport(ERROR,
						(errcode(ERRCODE_FDW_ERROR),
						 errmsg("ClickHouse server \"%s\" answered HTTP %ld while %s",
								server, reply->http_code, what),
						 detail[0] ? errdetail("%s", detail) : 0,
						 errcontext("%s", context)));
			}
			break;

		case CHHTTP_CONNECT_FAILED:
			ereport(ERROR,
					(errcode(ERRCODE_FDW_UNABLE_TO_ESTABLISH_CONNECTION),
					 errmsg("could not connect to ClickHouse server \"%s\" while %s",
							server, what),
					 errdetail("%s", terr),
					 errcontext("%s", context)));
			break;

		case CHHTTP_TLS_FAILED:
			ereport(ERROR,
					(errcode(ERRCODE_FDW_UNABLE_TO_ESTABLISH_CONNECTION),
					 errmsg("could not establish a TLS connection to ClickHouse server \"%s\" while %s",
							server, what),
					 errdetail("%s", terr),
					 errhint("Check the ca_file and verify_peer options of server \"%s\".",
							 server),
					 errcontext("%s", context)));
			break;

		case CHHTTP_TIMEOUT:
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("ClickHouse server \"%s\" did not answer in time while %s",
							server, what),
					 errdetail("%s. The statement may or may not have run on the server.",
							   terr),
					 errhint("The request_timeout option of the server limits how long a request may take."),
					 errcontext("%s", context)));
			break;

		case CHHTTP_REPLY_LOST:
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("lost the connection to ClickHouse server \"%s\" while %s",
							server, what),
					 errdetail("%s. The statement may or may not have run on the server.",
							   terr),
					 errcontext("%s", context)));
			break;

		case CHHTTP_CANCELED:
			/* a pending die or cancel exits the proper way */
			CHECK_FOR_INTERRUPTS();
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("canceling the request to ClickHouse server \"%s\" while %s",
							server, what),
					 errcontext("%s", context)));
			break;

		case CHHTTP_CLIENT_ERROR:
			ereport(ERROR,
					(errcode(ERRCODE_FDW_ERROR),
					 errmsg("could not send a request to ClickHouse server \"%s\" while %s",
							server, what),
					 errdetail("%s", terr),
					 errcontext("%s", context)));
			break;
	}
	/* every branch raised; keep the compiler and a corrupt status honest */
	elog(ERROR, "unexpected ClickHouse transport status %d", (int) status);
	pg_unreachable();
}

bool
dpwin_ch_status_transient(ChHttpStatus status, const ChHttpReply *reply)
{
	switch (status)
	{
		case CHHTTP_CONNECT_FAILED:
		case CHHTTP_TIMEOUT:
		case CHHTTP_REPLY_LOST:
			return true;
		case CHHTTP_SERVER_ERROR:
			break;
		default:
			return false;
	}

	/* request timeout and too many requests: worth another try */
	if (reply->http_code == 408 || reply->http_code == 429)
		return true;
	if (reply->http_code < 500 || reply->http_code > 599)
		return false;

	/* 5xx: transient unless the code says the statement itself is wrong */
	switch (reply->exception_code)
	{
		case 1:					/* UNSUPPORTED_METHOD */
		case 2:					/* UNSUPPORTED_PARAMETER */
		case 6:					/* CANNOT_PARSE_TEXT */
		case 7:					/* INCORRECT_NUMBER_OF_COLUMNS */
		case 8:					/* THERE_IS_NO_COLUMN */
		case 16:				/* NO_SUCH_COLUMN_IN_TABLE */
		case 20:				/* NUMBER_OF_COLUMNS_DOESNT_MATCH */
		case 27:				/* CANNOT_PARSE_INPUT_ASSERTION_FAILED */
		case 36:				/* BAD_ARGUMENTS */
		case 43:				/* ILLEGAL_TYPE_OF_ARGUMENT */
		case 44:				/* ILLEGAL_COLUMN */
		case 47:				/* UNKNOWN_IDENTIFIER */
		case 48:				/* NOT_IMPLEMENTED */
		case 49:				/* LOGICAL_ERROR */
		case 50:				/* UNKNOWN_TYPE */
		case 53:				/* TYPE_MISMATCH */
		case 57:				/* TABLE_ALREADY_EXISTS */
		case 60:				/* UNKNOWN_TABLE */
		case 62:				/* SYNTAX_ERROR */
		case 69:				/* ARGUMENT_OUT_OF_BOUND */
		case 70:				/* CANNOT_CONVERT_TYPE */
		case 81:				/* UNKNOWN_DATABASE */
		case 82:				/* DATABASE_ALREADY_EXISTS */
		case 115:				/* UNKNOWN_SETTING */
		case 117:				/* INCORRECT_DATA */
		case 164:				/* READONLY */
		case 192:				/* UNKNOWN_USER */
		case 193:				/* WRONG_PASSWORD */
		case 194:				/* REQUIRED_PASSWORD */
		case 195:				/* IP_ADDRESS_NOT_ALLOWED */
		case 344:				/* SUPPORT_IS_DISABLED */
		case 395:				/* FUNCTION_THROW_IF_VALUE_IS_NON_ZERO */
		case 497:				/* ACCESS_DENIED */
		case 516:				/* AUTHENTICATION_FAILED */
			return false;
		default:
			return true;
	}
}

bool
dpwin_ch_status_outcome_unknown(ChHttpStatus status)
{
	return status == CHHTTP_TIMEOUT || status == CHHTTP_REPLY_LOST ||
		status == CHHTTP_CANCELED;
}

/* ---- settling a statement whose reply was lost ---- */

/* Sleep on the process latch, waking up for interrupts. */
static void
ch_settle_sleep(int ms)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/* Milliseconds left until deadline, at least 1. */
static int
ch_settle_remaining(TimestampTz deadline)
{
	long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);

	return (int) Max(ms, 1);
}

/*
 * Send a statement that may safely run more than once, again after each
 * transient failure until the deadline.  A bounded statement gets a
 * request timeout that ends near the deadline (at least
 * CH_SETTLE_LOOKUP_MIN_MS); an unbounded one the client's own.  Returns
 * the last status.
 */
static ChHttpStatus
ch_try_until(ChClient *client, const char *sql, const char *tag,
			 TimestampTz deadline, bool bounded, ChHttpReply *reply)
{
	int			wait_ms = 100;

	for (;;)
	{
		ChHttpStatus status;
		int			timeout_ms = 0;

		if (bounded)
		{
			timeout_ms = Max(ch_settle_remaining(deadline), CH_SETTLE_LOOKUP_MIN_MS);
			if (client->conf->request_timeout_ms > 0)
				timeout_ms = Min(timeout_ms, client->conf->request_timeout_ms);
		}
		status = ch_post(client, sql, dpwin_ch_next_query_id(client, tag),
						 NULL, NULL, timeout_ms, reply);
		if (status == CHHTTP_OK || !dpwin_ch_status_transient(status, reply) ||
			GetCurrentTimestamp() >= deadline)
			return status;
		ch_settle_sleep(Min(wait_ms, ch_settle_remaining(deadline)));
		wait_ms = Min(wait_ms * 2, 1000);
	}
}

/*
 * Run one settling statement, retrying transient failures until the
 * deadline; ereports when it cannot get an answer.
 */
static char *
ch_settle_exec(ChClient *client, const char *sql, const char *what,
			   TimestampTz deadline)
{
	ChHttpReply reply;
	ChHttpStatus status;

	status = ch_try_until(client, sql, "settle", deadline, true, &reply);
	if (status != CHHTTP_OK)
		dpwin_ch_report(status, &reply, what);
	return reply.body.data;
}

ChHttpStatus
dpwin_ch_try_idempotent(ChClient *client, const char *sql, const char *tag,
						ChHttpReply *reply)
{
	return ch_try_until(client, sql, tag,
						TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													CH_SETTLE_TIMEOUT_MS),
						false, reply);
}

/* A non-negative decimal integer, nothing else. */
static bool
ch_parse_count(const char *s, int64 *result)
{
	char	   *end;

	if (!isdigit((unsigned char) s[0]))
		return false;
	errno = 0;
	*result = strtoi64(s, &end, 10);
	return errno == 0 && *end == '\0';
}

void
dpwin_ch_settle_query(ChClient *client, const char *query_id)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   CH_SETTLE_TIMEOUT_MS);
	char	   *lit = dpwin_ch_quote_literal(query_id);
	char	   *count_sql = psprintf("SELECT count() FROM system.processes WHERE query_id = %s FORMAT TabSeparated",
									 lit);
	char	   *kill_sql = psprintf("KILL QUERY WHERE query_id = %s SYNC FORMAT TabSeparated",
									lit);
	char	   *what = psprintf("settling query %s", query_id);
	int			wait_ms = 50;

	for (;;)
	{
		char	   *body = ch_settle_exec(client, count_sql, what, deadline);
		List	   *rows = dpwin_ch_parse_tsv(body);
		char	   *value = NULL;
		int64		running;

		if (list_length(rows) == 1 && list_length((List *) linitial(rows)) == 1)
			value = (char *) linitial((List *) linitial(rows));
		if (value == NULL || !ch_parse_count(value, &running))
			ereport(ERROR,
					(errcode(ERRCODE_FDW_ERROR),
					 errmsg("unexpected answer from ClickHouse while %s", what),
					 errdetail("system.processes lookup answered \"%s\".",
							   ch_clean_server_message(body))));
		if (running == 0)
			return;

		if (GetCurrentTimestamp() >= deadline)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_ERROR),
					 errmsg("could not settle ClickHouse query %s: it is still running",
							query_id),
					 errdetail("The query was still listed in system.processes %d ms after KILL QUERY ... SYNC.",
							   CH_SETTLE_TIMEOUT_MS),
					 errhint("Check system.processes on the ClickHouse server and retry once the query has ended.")));

		/* still running: stop it (idempotent), then look again */
		(void) ch_settle_exec(client, kill_sql, what, deadline);
		ch_settle_sleep(Min(wait_ms, ch_settle_remaining(deadline)));
		wait_ms = Min(wait_ms * 2, 500);
	}
}

/* ---- quoting ---- */

static char *
ch_quote(const char *s, char q)
{
	StringInfoData buf;
	const char *p;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, q);
	for (p = s; *p != '\0'; p++)
	{
		if (*p == '\\' || *p == q)
			appendStringInfoChar(&buf, '\\');
		appendStringInfoChar(&buf, *p);
	}
	appendStringInfoChar(&buf, q);
	return buf.data;
}

char *
dpwin_ch_quote_ident(const char *ident)
{
	return ch_quote(ident, '`');
}

char *
dpwin_ch_quote_literal(const char *str)
{
	return ch_quote(str, '\'');
}

char *
dpwin_ch_qualified_name(const char *database, const char *table)
{
	return psprintf("%s.%s", dpwin_ch_quote_ident(database), dpwin_ch_quote_ident(table));
}

/*
 * The items of a List of C strings, each quoted as a literal or, with a
 * database, as a table of it, separated by ", ".
 */
static char *
quoted_list(List *items, const char *database)
{
	StringInfoData buf;
	ListCell   *lc;

	initStringInfo(&buf);
	foreach(lc, items)
	{
		const char *item = lfirst(lc);

		appendStringInfo(&buf, "%s%s", foreach_current_index(lc) > 0 ? ", " : "",
						 database ? dpwin_ch_qualified_name(database, item) :
						 dpwin_ch_quote_literal(item));
	}
	return buf.data;
}

char *
dpwin_ch_quote_literal_list(List *items)
{
	return psprintf("(%s)", quoted_list(items, NULL));
}

char *
dpwin_ch_qualified_name_list(const char *database, List *tables)
{
	return quoted_list(tables, database);
}

/* ---- TabSeparated ---- */

/*
 * Unescape one field [start, end) of a TabSeparated answer; a field that
 * is exactly \N is NULL.
 */
static char *
ch_tsv_field(const char *start, const char *end)
{
	char	   *out;
	char	   *o;
	const char *p;

	if (end - start == 2 && start[0] == '\\' && start[1] == 'N')
		return NULL;

	out = palloc(end - start + 1);
	o = out;
	for (p = start; p < end; p++)
	{
		if (*p != '\\' || p + 1 >= end)
		{
			*o++ = *p;
			continue;
		}
		p++;
		switch (*p)
		{
			case 't':
				*o++ = '\t';
				break;
			case 'n':
				*o++ = '\n';
				break;
			case 'r':
				*o++ = '\r';
				break;
			case 'b':
				*o++ = '\b';
				break;
			case 'f':
				*o++ = '\f';
				break;
			case '0':
				/* a NUL cannot live in a C string; keep the escape visible */
				*o++ = '\\';
				*o++ = '0';
				break;
			case 'a':
				*o++ = '\a';
				break;
			case 'v':
				*o++ = '\v';
				break;
			default:
				/* \\ \' and any other escaped character stand for themselves */
				*o++ = *p;
				break;
		}
	}
	*o = '\0';
	return out;
}

List *
dpwin_ch_parse_tsv(const char *body)
{
	List	   *rows = NIL;
	const char *p = body;

	if (body == NULL)
		return NIL;

	while (*p != '\0')
	{
		List	   *row = NIL;
		const char *field = p;

		for (;;)
		{
			/* an escaped character never ends a field or a row */
			if (*p == '\\' && p[1] != '\0')
			{
				p += 2;
				continue;
			}
			if (*p == '\t' || *p == '\n' || *p == '\0')
			{
				row = lappend(row, ch_tsv_field(field, p));
				if (*p == '\t')
				{
					p++;
					field = p;
					continue;
				}
				if (*p == '\n')
					p++;
				break;
			}
			p++;
		}
		rows = lappend(rows, row);
	}
	return rows;
}

/* The i-th field of a row of dpwin_ch_parse_tsv(): "" for a missing field or \N. */
const char *
dpwin_ch_row_field(List *row, int i)
{
	char	   *s;

	if (i >= list_length(row))
		return "";
	s = (char *) list_nth(row, i);
	return s ? s : "";
}
