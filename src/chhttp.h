/*-------------------------------------------------------------------------
 *
 * chhttp.h
 *	  libcurl transport to the ClickHouse HTTP interface (chhttp.c).
 *
 *	  This layer never ereports for a transport or server failure: it
 *	  returns a status and fills a reply, and chclient.c decides what the
 *	  status means to the caller.  It never logs or prints the password.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_CHHTTP_H
#define DPWIN_CHHTTP_H

#include "lib/stringinfo.h"
#include "fdw.h"

typedef enum ChHttpStatus
{
	CHHTTP_OK = 0,				/* 2xx; reply->body holds the answer */
	CHHTTP_SERVER_ERROR,		/* the server answered with an error status */
	CHHTTP_CONNECT_FAILED,		/* no connection: nothing was sent */
	CHHTTP_TLS_FAILED,			/* TLS handshake or peer verification failed */
	CHHTTP_TIMEOUT,				/* connect or request timeout: outcome unknown */
	CHHTTP_REPLY_LOST,			/* sent, then the connection dropped: outcome
								 * unknown */
	CHHTTP_CANCELED,			/* interrupted by a pending cancel or die */
	CHHTTP_CLIENT_ERROR			/* local failure (bad URL, libcurl error) */
} ChHttpStatus;

/*
 * The ClickHouse exception codes (the server's ErrorCodes.cpp) that dpwin
 * reacts to, as ChHttpReply.exception_code carries them.
 */
#define CH_UNKNOWN_FUNCTION		46
#define CH_SYNTAX_ERROR			62
#define CH_UNKNOWN_SETTING		115
#define CH_READONLY				164
#define CH_ACCESS_DENIED		497
#define CH_PROJECTION_NOT_USED	584

typedef struct ChHttpReply
{
	long		http_code;		/* 0 when no answer arrived */
	int			exception_code; /* X-ClickHouse-Exception-Code (or the code of
								 * an exception found in the body); -1: an
								 * exception without a readable code; 0: none */
	StringInfoData body;		/* answer or error text, NUL-terminated */
	char	   *transport_error;	/* palloc'd libcurl message, or NULL */
	char	   *query_id;		/* X-ClickHouse-Query-Id echoed by the server,
								 * else the query_id sent, or NULL */
	const char *server_name;	/* foreign server the request went to (owned
								 * by the ChHttp), for messages */
} ChHttpReply;

/*
 * On any status but CHHTTP_OK, the password of the connection never
 * appears in reply->body or reply->transport_error (occurrences are
 * replaced by "********").
 *
 * Supplies the request body in pieces: copy at most max bytes into buf and
 * return how many, 0 at the end.  May not ereport (it runs inside libcurl);
 * set *failed and return 0 to abort the request: dpwin_chhttp_post() then returns
 * CHHTTP_CLIENT_ERROR ("the request body could not be produced").  The
 * connection is dropped mid-body, so the server sees a truncated chunked
 * body and fails the INSERT; blocks it already wrote may remain, which is
 * why loads go to attempt-owned staging tables.
 */
typedef size_t (*ChHttpBodyReader) (void *arg, char *buf, size_t max,
									bool *failed);

typedef struct ChHttp ChHttp;

/*
 * One keep-alive connection (a curl easy handle) configured from the
 * server options.  Released with dpwin_chhttp_close() or when the memory context
 * it was created in is reset or deleted.
 */
extern ChHttp *dpwin_chhttp_open(const DpwinServerConf *conf);
extern void dpwin_chhttp_close(ChHttp *http);

/*
 * POST one statement.  With no body (reader == NULL) the statement is the
 * request body; with a body the statement goes in the `query` URL
 * parameter and the body is streamed from reader with chunked encoding.
 * query_id is sent as the `query_id` parameter; settings are extra URL
 * parameters ("k=v&k2=v2", already escaped) sent in addition to the
 * server's (and win over them); timeout_ms > 0 overrides the request
 * timeout.  reply is initialised by the call and allocated in the caller's
 * CurrentMemoryContext.  A pending query cancel or die aborts the transfer
 * (CHHTTP_CANCELED); the caller must then CHECK_FOR_INTERRUPTS().
 */
extern ChHttpStatus dpwin_chhttp_post(ChHttp *http, const char *sql,
									  const char *query_id, const char *settings,
									  ChHttpBodyReader reader, void *reader_arg,
									  int timeout_ms, ChHttpReply *reply);

/*
 * One statement at a time may also be started and waited for later, so
 * that the caller works while the server answers: dpwin_chhttp_start()
 * sends it (the statement is the body, as with reader == NULL above),
 * connecting first when it must, and returns once the statement is sent,
 * without waiting for the answer; dpwin_chhttp_poll() moves it on
 * without waiting (call it now and then while working); and
 * dpwin_chhttp_wait() waits for it and returns what dpwin_chhttp_post()
 * would have.  The request timeout counts from the wait, not from the
 * start.  Until the wait, no other request may use the connection.
 * dpwin_chhttp_abandon() gives the request up and closes its connection;
 * closing the ChHttp does the same.  None of these ereport for a
 * transport or server failure.
 */
extern void dpwin_chhttp_start(ChHttp *http, const char *sql,
							   const char *query_id, const char *settings,
							   int timeout_ms);
extern void dpwin_chhttp_poll(ChHttp *http);
extern ChHttpStatus dpwin_chhttp_wait(ChHttp *http, ChHttpReply *reply);

/*
 * A started INSERT may also take its body from the caller piece by piece,
 * so that one request carries rows the caller is still producing:
 * dpwin_chhttp_start_fed() starts it (the statement in the URL, as with a
 * reader above); each dpwin_chhttp_feed() hands over the next piece and
 * returns once libcurl has taken all of it (the caller may then reuse the
 * memory), or false when the transfer ended before (the server answered
 * early, libcurl could not hand the piece over within the request
 * timeout, or an interrupt is pending): the wait then tells why.  dpwin_chhttp_feed()
 * with len 0 ends the body, and dpwin_chhttp_wait() waits for the answer;
 * a wait before the end gives the request up as CHHTTP_CLIENT_ERROR, so
 * that a body cut short is never sent as a whole one.  Such a body cannot
 * be sent again: a dead keep-alive connection is reported, not replaced.
 */
extern void dpwin_chhttp_start_fed(ChHttp *http, const char *sql,
								   const char *query_id, const char *settings,
								   int timeout_ms);
extern bool dpwin_chhttp_feed(ChHttp *http, const char *data, size_t len);
extern void dpwin_chhttp_abandon(ChHttp *http);

/* Short English name of a status, for messages. */
extern const char *dpwin_chhttp_status_name(ChHttpStatus status);

#endif							/* DPWIN_CHHTTP_H */
