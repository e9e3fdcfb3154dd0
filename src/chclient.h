/*-------------------------------------------------------------------------
 *
 * chclient.h
 *	  ClickHouse statements on top of the transport (chclient.c): maps
 *	  transport statuses to ereport (with the HTTP status and ClickHouse
 *	  exception code in the error context), quotes identifiers and literals,
 *	  parses TabSeparated answers, and settles statements whose reply was lost.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DPWIN_CHCLIENT_H
#define DPWIN_CHCLIENT_H

#include "chhttp.h"
#include "pg_compat.h"
#include "nodes/pg_list.h"

/*
 * A verdict on a failure: may the same work, tried again, succeed?  Set
 * where the failure is known (the client for a failed request, the chunk
 * worker for a staging table that does not verify), so that a retrying
 * caller decides from it rather than from the error's SQLSTATE.
 */
typedef enum DpwinFailure
{
	DPWIN_FAILURE_NONE,			/* no failure known */
	DPWIN_FAILURE_FINAL,
	DPWIN_FAILURE_TRANSIENT
} DpwinFailure;

typedef struct ChClient
{
	ChHttp	   *http;
	const DpwinServerConf *conf;
	char	   *query_id_prefix;	/* e.g. "dpwin-<invocation>-" */
	uint64		seq;			/* makes each query_id unique */
	DpwinFailure last_failure;	/* the verdict on the last request: NONE when
								 * it succeeded (chclient.c,
								 * ch_failure_verdict) */

	/*
	 * What admission learned of the server over this client, so that a
	 * re-admission in the same run asks only about the target
	 * (admission.c): the version it accepted (NULL before), whether
	 * system.projections exists, and whether system.row_policies was
	 * refused to this user.
	 */
	char	   *server_version;
	bool		server_has_projections;
	bool		row_policies_denied;

	char	   *started_what;	/* the started statement, for messages */
} ChClient;

extern PGDLLEXPORT ChClient *dpwin_ch_client_open(const DpwinServerConf *conf,
												  const char *query_id_prefix);
extern PGDLLEXPORT void dpwin_ch_client_close(ChClient *client);

/* A fresh unique query_id: prefix + label + sequence number. */
extern char *dpwin_ch_next_query_id(ChClient *client, const char *label);

/*
 * Run one statement and return the answer (TabSeparated unless the
 * statement says otherwise).  Any failure ereports: ClickHouse errors with
 * ERRCODE_FDW_ERROR family codes and the server's message, authentication
 * failures with ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION, connection
 * failures with ERRCODE_FDW_UNABLE_TO_ESTABLISH_CONNECTION, lost replies
 * and timeouts with ERRCODE_CONNECTION_FAILURE, cancellation with
 * ERRCODE_QUERY_CANCELED.  Every request sends settings that make the
 * behaviour independent of server defaults (async_insert=0,
 * wait_end_of_query=1, ...).
 */
extern PGDLLEXPORT char *dpwin_ch_exec(ChClient *client, const char *sql);

/* Same, with a caller-chosen query_id (for statements that may need
 * settling). */
extern char *dpwin_ch_exec_id(ChClient *client, const char *sql, const char *query_id);

/*
 * A statement whose answer is waited for later, while the caller works:
 * dpwin_ch_start() sends it (query_id: a fresh one tagged label);
 * dpwin_ch_poll() moves it on without waiting, for callers that work a
 * long time before they wait; dpwin_ch_finish() waits and returns the
 * answer, or fails as dpwin_ch_exec() does; dpwin_ch_finish_status()
 * returns the status instead, for a statement whose failure the caller
 * settles another way.  No other statement may use the client in between.
 * dpwin_ch_abandon() gives the statement up.
 */
extern PGDLLEXPORT void dpwin_ch_start(ChClient *client, const char *sql,
									   const char *label);
extern PGDLLEXPORT void dpwin_ch_poll(ChClient *client);
extern PGDLLEXPORT char *dpwin_ch_finish(ChClient *client);
extern ChHttpStatus dpwin_ch_finish_status(ChClient *client, ChHttpReply *reply);
extern void dpwin_ch_abandon(ChClient *client);

/*
 * An INSERT whose body the caller hands over piece by piece (chhttp.h,
 * dpwin_chhttp_start_fed()): dpwin_ch_start_fed() starts it with the given
 * query_id, dpwin_ch_feed() sends a piece (len 0 ends the body) and
 * returns false when the request ended early; dpwin_ch_finish_status()
 * waits for its answer, and dpwin_ch_abandon() gives it up.
 */
extern void dpwin_ch_start_fed(ChClient *client, const char *sql,
							   const char *query_id);
extern bool dpwin_ch_feed(ChClient *client, const char *data, size_t len);

/*
 * Run one statement and return the status instead of raising, for callers
 * that must handle a lost reply themselves (INSERT, EXCHANGE).  The body is
 * streamed from reader when not NULL.
 */
extern ChHttpStatus dpwin_ch_try(ChClient *client, const char *sql,
								 const char *query_id, ChHttpBodyReader reader,
								 void *reader_arg, ChHttpReply *reply);

/*
 * Same, for a statement that may run twice with the effect of once (DROP
 * TABLE IF EXISTS): a transient failure, a lost reply included, is sent
 * again, with a fresh query_id tagged `tag`, for up to the settling limit.
 */
extern ChHttpStatus dpwin_ch_try_idempotent(ChClient *client, const char *sql,
											const char *tag, ChHttpReply *reply);

/* ereport for a failed dpwin_ch_try; what names the operation. */
pg_noreturn extern void dpwin_ch_report(ChHttpStatus status, const ChHttpReply *reply,
										const char *what);

/* Could retrying this failure succeed (connection error, 5xx, timeout)? */
extern bool dpwin_ch_status_transient(ChHttpStatus status, const ChHttpReply *reply);

/* Does the outcome of the statement need settling (it may have run)? */
extern bool dpwin_ch_status_outcome_unknown(ChHttpStatus status);

/*
 * Make sure the statement with this query_id is no longer running on the
 * server: look it up in system.processes and KILL QUERY ... SYNC when it is
 * still there.  ereports if it cannot be settled.
 */
extern void dpwin_ch_settle_query(ChClient *client, const char *query_id);

/* `ident` with backticks, escaping backslash and backtick. */
extern char *dpwin_ch_quote_ident(const char *ident);

/* 'literal' with single quotes, escaping backslash and quote. */
extern char *dpwin_ch_quote_literal(const char *str);

/* ('a', 'b', ...): a List of C strings as a parenthesized literal list. */
extern char *dpwin_ch_quote_literal_list(List *items);

/* `db`.`table` */
extern char *dpwin_ch_qualified_name(const char *database, const char *table);

/* `db`.`a`, `db`.`b`, ...: a List of table names of one database. */
extern char *dpwin_ch_qualified_name_list(const char *database, List *tables);

/*
 * Parse a TabSeparated answer: a List of rows, each a List of palloc'd,
 * unescaped C strings ("\N" becomes NULL).
 */
extern List *dpwin_ch_parse_tsv(const char *body);

/* The i-th field of a parsed row: "" for a missing field or \N. */
extern const char *dpwin_ch_row_field(List *row, int i);

/*
 * The only value of a one-row, one-column answer (NULL for \N); ereports
 * otherwise.
 */
extern char *dpwin_ch_scalar(ChClient *client, const char *sql);

#endif							/* DPWIN_CHCLIENT_H */
