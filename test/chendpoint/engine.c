/*
 * engine.c - thin wrapper over the chDB C API.
 *
 * Only the handful of functions used here are declared, by hand: the npm
 * package ships the library without a header.  chdb_connection is an
 * opaque pointer; chdb_connect returns a pointer to one.
 */
#include "engine.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct chdb_conn_opaque *chdb_connection;
typedef struct chdb_result_opaque chdb_result;

static chdb_connection *(*p_connect)(int argc, char **argv);
static void (*p_close_conn)(chdb_connection *conn);
static chdb_result *(*p_query_n)(chdb_connection conn, const char *query,
				 size_t qlen, const char *format, size_t flen);
static char *(*p_result_buffer)(chdb_result *res);
static size_t (*p_result_length)(chdb_result *res);
static const char *(*p_result_error)(chdb_result *res);
static void (*p_destroy_result)(chdb_result *res);
/* Statistics: optional, older libraries lack some of them. */
static size_t (*p_rows_read)(chdb_result *res);
static size_t (*p_bytes_read)(chdb_result *res);
static uint64_t (*p_rows_written)(chdb_result *res);
static uint64_t (*p_bytes_written)(chdb_result *res);
static double (*p_elapsed)(chdb_result *res);

static char *data_path_arg;
static char *config_file_arg;	/* NULL: the engine's built-in defaults */

/*
 * Opening and closing sessions touches the engine's global state (the
 * first connect starts the embedded server); serialize them.  Queries on
 * distinct sessions run concurrently.
 */
static pthread_mutex_t connect_lock = PTHREAD_MUTEX_INITIALIZER;

struct engine_conn {
	chdb_connection *conn;
};

#define RESOLVE(ptr, name, required) \
	do { \
		*(void **) &(ptr) = dlsym(lib, name); \
		if ((required) && (ptr) == NULL) { \
			snprintf(err, errsz, "%s: symbol %s not found", \
			    libpath, name); \
			return -1; \
		} \
	} while (0)

int
engine_load(const char *libpath, char *err, size_t errsz)
{
	void *lib = dlopen(libpath, RTLD_NOW | RTLD_LOCAL);

	if (lib == NULL) {
		snprintf(err, errsz, "%s", dlerror());
		return -1;
	}
	RESOLVE(p_connect, "chdb_connect", 1);
	RESOLVE(p_close_conn, "chdb_close_conn", 1);
	RESOLVE(p_query_n, "chdb_query_n", 1);
	RESOLVE(p_result_buffer, "chdb_result_buffer", 1);
	RESOLVE(p_result_length, "chdb_result_length", 1);
	RESOLVE(p_result_error, "chdb_result_error", 1);
	RESOLVE(p_destroy_result, "chdb_destroy_query_result", 1);
	RESOLVE(p_rows_read, "chdb_result_rows_read", 0);
	RESOLVE(p_bytes_read, "chdb_result_bytes_read", 0);
	RESOLVE(p_rows_written, "chdb_result_rows_written", 0);
	RESOLVE(p_bytes_written, "chdb_result_bytes_written", 0);
	RESOLVE(p_elapsed, "chdb_result_elapsed", 0);
	return 0;
}

void
engine_set_path(const char *path)
{
	size_t len = strlen("--path=") + strlen(path) + 1;

	data_path_arg = malloc(len);
	if (data_path_arg == NULL)
		abort();
	snprintf(data_path_arg, len, "--path=%s", path);
}

void
engine_set_config_file(const char *path)
{
	size_t len = strlen("--config-file=") + strlen(path) + 1;

	config_file_arg = malloc(len);
	if (config_file_arg == NULL)
		abort();
	snprintf(config_file_arg, len, "--config-file=%s", path);
}

/*
 * Every connection passes the same arguments: the first one boots the
 * engine with them, the others attach to the running engine.
 */
struct engine_conn *
engine_connect(void)
{
	char *argv[] = {"clickhouse", data_path_arg, config_file_arg, NULL};
	int argc = config_file_arg != NULL ? 3 : 2;
	struct engine_conn *c = malloc(sizeof(*c));

	if (c == NULL)
		return NULL;
	pthread_mutex_lock(&connect_lock);
	c->conn = p_connect(argc, argv);
	pthread_mutex_unlock(&connect_lock);
	if (c->conn == NULL) {
		free(c);
		return NULL;
	}
	return c;
}

void
engine_close(struct engine_conn *c)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&connect_lock);
	p_close_conn(c->conn);
	pthread_mutex_unlock(&connect_lock);
	free(c);
}

/* strdup that does not return NULL: out of memory is fatal here. */
static char *
dup_or_die(const char *s)
{
	char *p = strdup(s);

	if (p == NULL)
		abort();
	return p;
}

int
engine_error_code(const char *msg)
{
	const char *p = msg;

	if (msg == NULL)
		return 0;
	/* Some messages wrap another: take the first code. */
	p = strstr(msg, "Code: ");
	if (p == NULL)
		return 0;
	return atoi(p + 6);
}

int
engine_query(struct engine_conn *c, const char *query, size_t qlen,
	     const char *format, struct engine_result *res)
{
	chdb_result *r;
	const char *err;

	memset(res, 0, sizeof(*res));
	r = p_query_n(*c->conn, query, qlen, format, strlen(format));
	if (r == NULL) {
		res->error = dup_or_die("Code: 1001. DB::Exception: the engine "
		    "returned no result. (STD_EXCEPTION)");
		res->code = 1001;
		return -1;
	}
	err = p_result_error(r);
	if (err != NULL) {
		res->error = dup_or_die(err);
		res->code = engine_error_code(err);
		if (res->code == 0)
			res->code = 1001;
		p_destroy_result(r);
		return -1;
	}
	res->handle = r;
	res->data = p_result_buffer(r);
	res->len = p_result_length(r);
	if (res->data == NULL)
		res->len = 0;
	if (p_rows_read)
		res->rows_read = p_rows_read(r);
	if (p_bytes_read)
		res->bytes_read = p_bytes_read(r);
	if (p_rows_written)
		res->rows_written = p_rows_written(r);
	if (p_bytes_written)
		res->bytes_written = p_bytes_written(r);
	if (p_elapsed)
		res->elapsed = p_elapsed(r);
	return 0;
}

void
engine_result_free(struct engine_result *res)
{
	if (res->handle != NULL)
		p_destroy_result(res->handle);
	free(res->error);
	memset(res, 0, sizeof(*res));
}

int
engine_exec(struct engine_conn *c, const char *query, char **error,
	    int *code)
{
	struct engine_result res;

	if (engine_query(c, query, strlen(query), "TabSeparated", &res) != 0) {
		*error = res.error;
		*code = res.code;
		res.error = NULL;
		engine_result_free(&res);
		return -1;
	}
	engine_result_free(&res);
	return 0;
}
