/*
 * engine.h - the embedded ClickHouse engine (chDB's libchdb.so), loaded
 * with dlopen so that building the endpoint does not need the library.
 */
#ifndef CHENDPOINT_ENGINE_H
#define CHENDPOINT_ENGINE_H

#include <stddef.h>
#include <stdint.h>

/* One engine session: its own settings, current database, parameters. */
struct engine_conn;

struct engine_result {
	void *handle;		/* the engine's result; NULL after failure */
	const char *data;	/* result bytes (owned by handle) */
	size_t len;
	char *error;		/* malloc'ed "Code: N. DB::Exception: ..." */
	int code;		/* ClickHouse error code, 0 on success */
	uint64_t rows_read, bytes_read, rows_written, bytes_written;
	double elapsed;		/* seconds */
};

/* Load the library and resolve symbols; 0 on success, else fills err. */
int engine_load(const char *libpath, char *err, size_t errsz);

/* Set the data directory used by every connection. */
void engine_set_path(const char *path);

/*
 * Set the server configuration file (config.xml) the engine boots with,
 * as clickhouse-server's --config-file; call before the first connection.
 * Without it the engine uses its built-in defaults.
 */
void engine_set_config_file(const char *path);

/* Open a session on the data directory; NULL on failure. */
struct engine_conn *engine_connect(void);
void engine_close(struct engine_conn *conn);

/*
 * Run one statement.  'format' is the default output format.  Returns 0 on
 * success, -1 on a query error (res->error, res->code set).  The caller
 * releases res with engine_result_free.
 */
int engine_query(struct engine_conn *conn, const char *query, size_t qlen,
		 const char *format, struct engine_result *res);
void engine_result_free(struct engine_result *res);

/*
 * Run a statement whose output is not needed.  Returns 0, or -1 with
 * *error (malloc'ed) and *code set.
 */
int engine_exec(struct engine_conn *conn, const char *query, char **error,
		int *code);

/* The error code in a "Code: N. ..." message, or 0. */
int engine_error_code(const char *msg);

#endif
