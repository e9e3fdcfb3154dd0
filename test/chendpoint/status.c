/*
 * status.c - ClickHouse error codes as the server's HTTP handler reports
 * them: names, HTTP statuses, the end of an error message, and the
 * Content-Type of each output format.
 */
#include <stdlib.h>
#include <string.h>

#include "chendpoint.h"

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

const char *
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

int
http_status_for(int code)
{
	size_t i;

	for (i = 0; i < N_STATUS_MAP; i++)
		if (status_code_of[i] == code && code > 0)
			return status_map[i].status;
	return 500;
}

/* Load code names from the engine; keeps the fallbacks on failure. */
void
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
const char *
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

/*
 * The body of an error answer.  The server ends every exception message
 * with its version, "(version 24.8.4.13 (official build))", which the
 * engine's messages lack; clients see it and may trim it.
 */
char *
error_body(const char *msg)
{
	size_t n = strlen(msg);

	while (n > 0 && msg[n - 1] == '\n')
		n--;
	if (strstr(msg, "(version ") != NULL)
		return xasprintf("%.*s\n", (int) n, msg);
	return xasprintf("%.*s (version %s (official build))\n", (int) n, msg,
	    g.engine_version[0] ? g.engine_version : "unknown");
}
